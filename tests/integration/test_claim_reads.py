"""What a claim reads (ADR 0051): the rows of the task types it names, never a backlog of
another type, nor of a type it names that an operator paused; and so the claim poll.

Counted, not timed (``tests.support.statement_reads``), with a backlog of a few
operations and again with one of hundreds ahead in the queue's order.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from durable_ops.storage import operations, task_pauses
from durable_ops.storage.db import Database
from durable_ops.storage.tx import Tx
from tests.support.statement_reads import reads_of

NOW = datetime(2026, 12, 5, 9, 0, tzinfo=UTC)
NAMED, UNNAMED, PAUSED = "reads.named", "reads.unnamed", "reads.paused"
BACKLOG = 400  # of each of the two types the claim may not take
# What reading the backlog would add at the least: a row or index entry each on MariaDB,
# some ten VM steps each on SQLite. Growth beyond a tenth of it fails.
WALK = {"mysql": 2 * BACKLOG, "sqlite": 10 * 2 * BACKLOG}


def _fill(db: Database, task_type: str, count: int, start: int = 0) -> None:
    def create(tx: Tx) -> None:
        for n in range(start, start + count):
            key = f"{task_type}-{n}"
            request = operations.CreateRequest(task_type, key, "job", "j", priority=9)
            operations.create(tx, request, NOW - timedelta(seconds=1), fair=False)

    db.run(create, owner_id="backlog")


def _claim(tx: Tx) -> object:  # one of the three claimable, each time
    claimed = operations.claim(tx, [NAMED, PAUSED], 30, NOW, limit=1)
    assert [claim.operation.task_type for claim in claimed] == [NAMED]
    return claimed


def _poll(tx: Tx) -> object:
    asked = {("queued", NAMED), ("queued", PAUSED)}
    assert operations.claimable_kinds(tx, NOW, asked) == {("queued", NAMED)}
    return asked


def test_a_claim_and_the_claim_poll_read_no_backlog_they_may_not_take(
    database: Database,
) -> None:
    for task_type in (NAMED, UNNAMED, PAUSED):
        _fill(database, task_type, 3)
    database.run(lambda tx: task_pauses.pause(tx, PAUSED, "test", NOW), owner_id=None)
    before = {"claim": reads_of(database, _claim), "poll": reads_of(database, _poll)}
    _fill(database, UNNAMED, BACKLOG, start=3)
    _fill(database, PAUSED, BACKLOG, start=3)
    after = {"claim": reads_of(database, _claim), "poll": reads_of(database, _poll)}
    walk = WALK[database.dialect]
    assert all(after[name] - before[name] < walk / 10 for name in before), (before, after)
