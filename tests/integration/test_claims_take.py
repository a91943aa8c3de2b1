"""What the claim's UPDATE writes on the row it takes (``storage.operations.claims``), both
engines: a new run keeps the operation's first start and starts its progress from nothing,
and a batch is bounded."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import partial

import pytest

from durable_ops.model.errors import InvalidArgument
from durable_ops.model.held_leases import HeldLease
from durable_ops.storage import operations
from durable_ops.storage.db import Database
from durable_ops.storage.operations import claims

TASK = "fleet.take"
OWNER = "alice"
START = datetime(2026, 12, 5, 9, 0, tzinfo=UTC)


def _claim(db: Database, at: datetime, limit: int = 1) -> list[claims.Claim]:
    return db.run(lambda tx: operations.claim(tx, [TASK], 30, at, limit=limit), owner_id=None)


def _stored(db: Database, operation_id: str) -> tuple[datetime, int]:
    row = db.run(lambda tx: operations.get(tx, operation_id), owner_id=OWNER)
    started = row.started_at
    assert started is not None
    return started.replace(tzinfo=None), row.progress_percent


def test_a_new_run_keeps_the_first_start_and_starts_its_progress_from_nothing(
    database: Database,
) -> None:
    request = operations.CreateRequest(
        task_type=TASK,
        idempotency_key="k",
        subject_type="job",
        subject_id="j",
        retry_delay_seconds=1,
    )
    created, _ = database.run(lambda tx: operations.create(tx, request, START), owner_id=OWNER)
    first_start = START + timedelta(seconds=1)
    (first,) = _claim(database, first_start)
    lease = HeldLease(created.id, OWNER, first.lease_token, 30, progress=40)
    database.run(
        lambda tx: operations.heartbeat(tx, lease, first_start + timedelta(seconds=1)),
        owner_id=None,
    )
    for seconds in (40, 60):  # the lease runs out; the retry comes due
        database.run(
            partial(operations.sweep, now=START + timedelta(seconds=seconds)), owner_id=None
        )
    # Waiting, it still shows how far the last run got ("will resume") …
    assert _stored(database, created.id) == (first_start.replace(tzinfo=None), 40)
    (again,) = _claim(database, START + timedelta(seconds=61))
    assert again.operation.attempt == 2
    # … and the new run starts from nothing, the operation's first start kept.
    assert _stored(database, created.id) == (first_start.replace(tzinfo=None), 0)


def test_a_claim_batch_is_bounded(database: Database) -> None:
    assert _claim(database, START, limit=operations.CLAIM_BATCH_MAX) == []
    with pytest.raises(InvalidArgument):
        _claim(database, START, limit=operations.CLAIM_BATCH_MAX + 1)
    with pytest.raises(InvalidArgument):
        _claim(database, START, limit=0)
