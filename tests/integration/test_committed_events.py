"""What a transaction says it changed reaches ``Database.events`` after COMMIT, and only then."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from durable_ops.model.errors import InvalidArgument
from durable_ops.model.lifecycle import Event
from durable_ops.model.states import OperationState
from durable_ops.storage import operations
from durable_ops.storage.db import Database
from durable_ops.storage.events import Changed, Committed, Requeued, publish
from durable_ops.storage.tx import Tx

NOW = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)
SAID = Changed("op", OperationState.QUEUED, "report.build")


class Heard:
    def __init__(self, db: Database) -> None:
        self.changes: list[Committed] = []
        self.threads: set[int] = set()
        db.events.subscribe(self)

    def __call__(self, changes: Sequence[Committed]) -> None:
        self.changes.extend(changes)
        self.threads.add(threading.get_ident())


def _says(tx: Tx) -> None:
    publish(SAID)


def _says_then_refuses(tx: Tx) -> None:
    publish(SAID)
    raise InvalidArgument("field", "is refused")


@pytest.mark.parametrize("short", [False, True])
def test_a_committed_change_is_delivered_on_the_loop_thread(
    database: Database, short: bool
) -> None:
    heard = Heard(database)

    async def run() -> int:
        await database.run_async(_says, owner_id=None, short=short)
        return threading.get_ident()

    loop_thread = asyncio.run(run())
    assert heard.changes == [SAID]
    assert heard.threads == {loop_thread}


def test_a_rolled_back_change_is_never_delivered(database: Database) -> None:
    heard = Heard(database)
    with pytest.raises(InvalidArgument):
        asyncio.run(database.run_async(_says_then_refuses, owner_id=None, short=True))
    assert heard.changes == []


def test_a_synchronous_caller_wakes_nobody(database: Database) -> None:
    heard = Heard(database)
    database.run(_says, owner_id=None)
    assert heard.changes == []


def test_a_create_and_its_claim_say_what_they_changed(database: Database) -> None:
    heard = Heard(database)
    request = operations.CreateRequest("report.build", "k", "report", "r1")

    async def run() -> None:
        await database.run_async(lambda tx: operations.create(tx, request, NOW), owner_id="alice")
        await database.run_async(
            lambda tx: operations.claim(tx, ["report.build"], 30, NOW), owner_id=None
        )

    asyncio.run(run())
    assert [(c.state, c.task_type) for c in heard.changes if isinstance(c, Changed)] == [
        (OperationState.QUEUED, "report.build"),
        (OperationState.RUNNING, "report.build"),
    ]


def test_a_sweep_that_queues_a_due_retry_wakes_the_claims_waiting_here(
    database: Database,
) -> None:
    """A requeue's kinds are not known (``Requeued``): without it, a claim waiting here took
    the due retry only when the shared poll came round."""
    request = operations.CreateRequest("report.build", "k", "report", "r1", max_attempts=2)
    created, _ = database.run(lambda tx: operations.create(tx, request, NOW), owner_id="alice")
    (claim,) = database.run(
        lambda tx: operations.claim(tx, ["report.build"], 30, NOW), owner_id=None
    )
    failed = operations.Settlement(
        "alice", created.id, claim.lease_token, Event.FAIL_RETRYABLE, failure_code="busy"
    )
    database.run(lambda tx: operations.settle(tx, [failed], NOW), owner_id=None)
    due = database.run(lambda tx: operations.get(tx, created.id), owner_id="alice").next_attempt_at
    assert due is not None
    heard = Heard(database)

    def sweep(now: datetime) -> list[Committed]:
        heard.changes.clear()
        asyncio.run(database.run_async(lambda tx: operations.sweep(tx, now), owner_id=None))
        return heard.changes

    assert sweep(due - timedelta(microseconds=1)) == []
    assert sweep(due) == [Requeued()]
