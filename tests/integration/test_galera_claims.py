"""The claim spread over the head of the queue (Galera, ADR 0017), forced on both engines.

On a Galera node a claim takes one of the first ``CLAIM_SPREAD`` claimable
rows of the top priority at random; its ordering promise is checked here
without a cluster: never a lower priority while a higher one is claimable,
within a priority one of the oldest ``CLAIM_SPREAD``, every row claimed once.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
from sqlalchemy import select

from durable_ops.storage import operations, task_pauses
from durable_ops.storage.db import Database
from durable_ops.storage.operations import claims
from durable_ops.storage.schema import UserOperation

START = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
TASK = "test.spread"


@pytest.fixture
def spread(database: Database, monkeypatch: pytest.MonkeyPatch) -> Database:
    monkeypatch.setattr(claims, "spreads", lambda _tx: True)
    return database


def _create(db: Database, number: int, priority: int) -> str:
    request = operations.CreateRequest(
        task_type=TASK,
        idempotency_key=f"k{number}",
        subject_type="job",
        subject_id="j",
        priority=priority,
    )
    created = START + timedelta(seconds=number)
    row, _ = db.run(lambda tx: operations.create(tx, request, created), owner_id="alice")
    return row.id


def _claim(db: Database) -> str | None:
    now = START + timedelta(hours=1)
    taken = db.run(lambda tx: operations.claim(tx, [TASK], 60, now), owner_id=None)
    return taken[0].operation.id if taken else None


def test_a_spread_claim_takes_the_top_priority_first_and_one_of_its_oldest(
    spread: Database,
) -> None:
    low = [_create(spread, number, priority=0) for number in range(3)]
    high = [_create(spread, 10 + number, priority=5) for number in range(12)]
    oldest_high = high[: operations.CLAIM_SPREAD]
    claimed = [_claim(spread) for _ in high]
    assert claimed[0] in oldest_high
    assert sorted(map(str, claimed)) == sorted(high)  # every high one before any low one
    rest = [_claim(spread) for _ in low]
    assert sorted(map(str, rest)) == sorted(low)
    assert _claim(spread) is None  # each claimed exactly once


def test_an_empty_queue_claims_nothing(spread: Database) -> None:
    assert _claim(spread) is None


def test_the_spread_reaches_the_oldest_few_and_no_further(
    spread: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last of the head's ``CLAIM_SPREAD`` rows is a pick (a spread of one would make
    every node's claim take the same row and fail certification), the next one is not."""
    monkeypatch.setattr(claims, "random", SimpleNamespace(shuffle=list.reverse))
    queued = [_create(spread, number, priority=0) for number in range(claims.CLAIM_SPREAD + 2)]
    assert _claim(spread) == queued[claims.CLAIM_SPREAD - 1]


def test_a_spread_claim_takes_the_next_free_row_when_the_head_is_held(
    spread: Database, engine_name: str
) -> None:
    """Every row of the head locked by claims under way: the claim takes the next free one
    instead of answering that nothing is claimable."""
    if engine_name == "sqlite":
        pytest.skip("SQLite has no row locks: its writers take turns")
    queued = [_create(spread, number, priority=0) for number in range(claims.CLAIM_SPREAD + 1)]
    head = queued[: claims.CLAIM_SPREAD]
    other = Database(str(spread.engine.url.render_as_string(hide_password=False)), pool_size=1)
    try:
        with other.engine.connect() as claiming, claiming.begin():
            for operation_id in head:  # by primary key, one by one, as each claim's pick
                held = select(UserOperation.id).where(UserOperation.id == operation_id)
                assert claiming.execute(held.with_for_update()).scalar() == operation_id
            assert _claim(spread) == queued[claims.CLAIM_SPREAD]
    finally:
        other.dispose()


def test_a_type_paused_while_a_spread_claim_picks_is_not_taken(
    spread: Database, engine_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An operator's pause that commits between the head's read (unlocked) and the pick:
    the pick checks the pause again, so no operation of a paused type starts."""
    if engine_name == "sqlite":
        pytest.skip("SQLite runs one writer at a time: the pause cannot commit inside the claim")
    _create(spread, 0, priority=0)
    operator = Database(str(spread.engine.url.render_as_string(hide_password=False)), pool_size=1)

    def paused_meanwhile(_ids: list[str]) -> None:  # between the head's read and the pick
        operator.run(lambda tx: task_pauses.pause(tx, TASK, "ops.admin", START), owner_id=None)

    monkeypatch.setattr(claims, "random", SimpleNamespace(shuffle=paused_meanwhile))
    try:
        assert _claim(spread) is None
    finally:
        operator.dispose()
