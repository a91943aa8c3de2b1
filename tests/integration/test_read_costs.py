"""What the frequent reads read: never a backlog they may not take, nor history.

- a claim (ADR 0051): the rows of the task types it names, never a backlog of another
  type, nor of a type it names that an operator paused; and so the claim poll;
- the queue gauges and the console's queues (ADR 0052): no finished operation;
- admission's count of its owner's active operations, under the global admission
  lock: none of the owner's finished ones; the unread count: none of the owner's
  read notifications (ADR 0053); the owner watch's poll, ten times a second: each
  watched owner's newest change, not all of them;
- a worker's read of a subject under its lease (ADR 62): the one operation it names.

Counted, not timed (``tests.support.statement_reads``), with a few rows and again with
hundreds more that must not be read.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from durable_ops.model.states import OperationState
from durable_ops.storage import (
    capacity,
    notifications,
    operations,
    operator,
    owner_changes,
    task_pauses,
)
from durable_ops.storage.db import Database
from durable_ops.storage.tx import OperatorTx, Tx
from tests.support.statement_reads import reads_of

NOW = datetime(2026, 12, 5, 9, 0, tzinfo=UTC)
NAMED, UNNAMED, PAUSED = "reads.named", "reads.unnamed", "reads.paused"
OWNER = "owner-with-history"
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


def _history(db: Database, count: int, start: int) -> None:
    """``count`` operations of the owner ``OWNER`` created and cancelled, their
    notifications read."""

    def work(tx: Tx) -> None:
        for n in range(start, start + count):
            request = operations.CreateRequest(NAMED, f"done-{n}", "job", "j")
            created, _ = operations.create(tx, request, NOW, fair=False)
            operations.cancel(tx, created.id, NOW)
        notifications.mark_all_read(tx, NOW)

    db.run(work, owner_id=OWNER)


def _queue_depths(tx: Tx) -> list[operator.QueueDepth]:
    return operator.queue_depths(OperatorTx(tx))


def _owners_active(tx: Tx) -> int:
    return capacity.active_for_owner(Tx(tx.connection, OWNER), [NAMED])


def _owners_unread(tx: Tx) -> int:
    return notifications.unread_count(Tx(tx.connection, OWNER))


def _owners_newest(tx: Tx) -> dict[str, datetime]:
    return owner_changes.newest_among(tx, ["someone-else", OWNER])


def _costs(db: Database) -> dict[str, int]:
    return {
        "depths": reads_of(db, _queue_depths),
        "active": reads_of(db, _owners_active),
        "unread": reads_of(db, _owners_unread),
        "watch": reads_of(db, _owners_newest),
    }


def test_the_queue_depths_the_owner_counts_and_the_watch_poll_read_no_history(
    database: Database,
) -> None:
    _fill(database, NAMED, 1)
    active = operations.CreateRequest(NAMED, "active", "job", "j")
    database.run(lambda tx: operations.create(tx, active, NOW), owner_id=OWNER)
    _history(database, 3, 0)
    before = _costs(database)
    _history(database, BACKLOG, 3)
    after = _costs(database)
    walk = WALK[database.dialect] / 2  # one backlog, not two
    assert all(after[name] - before[name] < walk / 10 for name in before), (before, after)
    [depth] = database.run(_queue_depths, owner_id=None, write=False)
    assert depth.counts == {OperationState.QUEUED: 2}
    assert database.run(_owners_active, owner_id=None, write=False) == 1
    assert database.run(_owners_unread, owner_id=None, write=False) == 0
    assert list(database.run(_owners_newest, owner_id=None, write=False)) == [OWNER]


def test_a_workers_read_under_its_lease_reads_its_operation_only(database: Database) -> None:
    """The lease check of a subject read is one primary-key read: none of the owner's
    history (``operations.held_references``)."""
    snapshot = "strategy.snapshot"  # an analysis: only its lease grants a read
    running = operations.CreateRequest(snapshot, "running", "job", "j", context_ref="cv")
    database.run(lambda tx: operations.create(tx, running, NOW), owner_id=OWNER)
    [claimed] = database.run(lambda tx: operations.claim(tx, [snapshot], 30, NOW), owner_id=None)

    def check(tx: Tx) -> frozenset[tuple[str, str]]:
        held = Tx(tx.connection, OWNER)
        return operations.held_references(held, claimed.operation.id, claimed.lease_token, NOW)

    _history(database, 3, 0)
    before = reads_of(database, check)
    _history(database, BACKLOG, 3)
    after = reads_of(database, check)
    assert after - before < WALK[database.dialect] / 2 / 10, (before, after)
    assert database.run(check, owner_id=None, write=False) == {("jobs", "j"), ("attachments", "cv")}
