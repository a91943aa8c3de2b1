"""Fair shares across owners within a priority (issue 37 point 1, ADR 0049), both engines.

One owner's backlog does not delay another owner's next operation; weights give an
owner more turns; priorities stay strict; with fairness off the order is first due,
first out. The storage is driven directly (``operations.create`` / ``claim``) with a
clock moved by hand, so each order is exact.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from functools import partial
from itertools import pairwise

import pytest
from sqlalchemy import select

from durable_ops import cli
from durable_ops.model import bounds, fairness
from durable_ops.model.lifecycle import Event
from durable_ops.model.states import OperationState
from durable_ops.storage import operations, shares
from durable_ops.storage import operator as store
from durable_ops.storage.db import Database
from durable_ops.storage.operations.rows import ROWS_MAX
from durable_ops.storage.schema import OwnerShare, UserOperation
from durable_ops.storage.tx import OperatorTx, Tx
from tests.support.grpc_services import Services

TASK = "fleet.work"
OTHER_TASK = "fleet.other"
START = datetime(2026, 12, 5, 9, 0, tzinfo=UTC)


class Queue:
    """Creates and claims on one database, one tick of the clock per create."""

    def __init__(self, db: Database, *, fair: bool = True) -> None:
        self.db = db
        self.fair = fair
        self.now = START
        self.owner_of: dict[str, str] = {}
        self._made = 0

    def create(
        self,
        owner: str,
        count: int = 1,
        priority: int = 0,
        not_before: datetime | None = None,
        task_type: str = TASK,
    ) -> list[str]:
        made = []
        for _ in range(count):
            self._made += 1
            self.now += timedelta(milliseconds=1)
            request = operations.CreateRequest(
                task_type=task_type,
                idempotency_key=f"k-{self._made}",
                subject_type="job",
                subject_id=f"s-{self._made}",
                priority=priority,
                not_before=not_before,
            )
            operation, _ = self.db.run(
                partial(operations.create, request=request, now=self.now, fair=self.fair),
                owner_id=owner,
            )
            self.owner_of[operation.id] = owner
            made.append(operation.id)
        return made

    def claim(self, count: int = 1, task_types: tuple[str, ...] = (TASK,)) -> list[str]:
        self.now += timedelta(milliseconds=1)
        now = self.now
        claims = self.db.run(
            lambda tx: operations.claim(tx, task_types, 30, now, limit=count), owner_id=None
        )
        return [claim.operation.id for claim in claims]

    def sweep(self) -> operations.SweepReport:
        now = self.now
        return self.db.run(lambda tx: operations.sweep(tx, now), owner_id=None)

    def owners(self, ids: list[str]) -> list[str]:
        return [self.owner_of[operation_id] for operation_id in ids]


@pytest.fixture
def queue(services: Services) -> Queue:
    return Queue(services.db)


def test_a_big_backlog_does_not_delay_another_owners_next_operation(queue: Queue) -> None:
    queue.create("alice", 50)
    others = [queue.create(owner)[0] for owner in ("bob", "carol", "dave")]
    first = [queue.claim()[0] for _ in range(4)]
    assert set(others) <= set(first)  # each after at most one of alice's
    assert queue.owners(first).count("alice") == 1


def test_two_backlogs_take_turns_and_a_batch_claim_alternates(queue: Queue) -> None:
    queue.create("alice", 20)
    queue.create("bob", 20)
    taken = queue.owners(queue.claim(10))
    assert Counter(taken) == {"alice": 5, "bob": 5}
    assert all(a != b for a, b in pairwise(taken))


def test_an_owner_back_after_an_idle_hour_takes_turns_with_the_backlog_it_finds(
    queue: Queue,
) -> None:
    """Its last turn, an hour old, banks nothing: its burst alternates with the backlog
    another owner made meanwhile instead of going ahead of all of it."""
    queue.create("alice", 3)
    assert len(queue.claim(3)) == 3
    queue.now += timedelta(hours=1)
    queue.create("bob", 3)
    queue.create("alice", 3)
    assert queue.owners(queue.claim(6)) == ["bob", "alice"] * 3


def test_a_claim_of_several_task_types_keeps_the_owners_turns(queue: Queue) -> None:
    backlog = queue.create("alice", 3)
    (other,) = queue.create("bob", task_type=OTHER_TASK)
    assert queue.claim(2, (TASK, OTHER_TASK)) == [backlog[0], other]


def test_a_due_scheduled_operation_is_claimed_only_once_a_sweep_let_it_in(queue: Queue) -> None:
    """Held out of the line till then: claimed before its sweep it would skip every turn
    at its priority (its turn is not taken yet)."""
    backlog = queue.create("alice", 3)
    (later,) = queue.create("bob", not_before=queue.now + timedelta(seconds=1))
    queue.now += timedelta(seconds=2)
    assert queue.claim(4) == backlog
    assert queue.sweep().let_in == 1
    assert queue.claim() == [later]


def test_a_claim_whose_clock_reads_before_its_time_does_not_take_it(queue: Queue) -> None:
    """Another replica's sweep let it in at its time; a claim on a replica whose clock is a
    little behind still finds it not due."""
    due = queue.now + timedelta(seconds=1)
    (later,) = queue.create("bob", not_before=due)
    queue.now = due
    assert queue.sweep().let_in == 1
    queue.now = due - timedelta(milliseconds=2)  # the claim moves it on by one
    assert queue.claim() == []
    queue.now = due
    assert queue.claim() == [later]


def test_a_scheduled_operation_takes_its_turn_when_it_joins_the_line(queue: Queue) -> None:
    """Its turn was its due time, set at create: a backlog's turns lag the clock by as long
    as it takes, so the operation waited behind every one a greedy owner made before that
    moment (12 s behind 200 in the outside test), and its owner's next plain operation
    behind it."""
    queue.create("alice", 50)
    later = queue.create("bob", not_before=queue.now + timedelta(seconds=3))[0]
    queue.create("carol", not_before=queue.now + timedelta(days=1))
    carol_now = queue.create("carol")[0]
    first = queue.claim(2)
    assert carol_now in first, queue.owners(first)
    queue.now += timedelta(seconds=3)
    assert queue.sweep().let_in == 1
    taken = queue.claim(2)
    assert later in taken, queue.owners(taken)


def test_scheduled_operations_let_in_by_one_sweep_take_turns_earliest_due_first(
    queue: Queue,
) -> None:
    """A sweep lets in every one that came due since the last (ADR 56): each takes its
    turn as a create would, in the order they came due, not the order of their rows."""
    (later,) = queue.create("bob", not_before=queue.now + timedelta(seconds=2))
    (sooner,) = queue.create("bob", not_before=queue.now + timedelta(seconds=1))
    queue.now += timedelta(seconds=3)
    assert queue.sweep().let_in == 2
    assert queue.claim(2) == [sooner, later]


def test_a_retried_operation_takes_a_new_turn_as_new_work_does(queue: Queue) -> None:
    """A manual retry (the owner's, or an operator's: both are ``operations.retry``) queues
    the operation as new work of its owner (ADR 65). It kept its first turn, so an owner's
    cancelled work retried in bulk all went before every other owner's waiting work."""
    old = queue.create("bob", 5)
    for operation_id in old:
        queue.db.run(
            partial(operations.cancel, operation_id=operation_id, now=queue.now), owner_id="bob"
        )
    queue.create("alice", 10)
    queue.now += timedelta(seconds=1)
    for operation_id in old:
        queue.db.run(
            partial(operations.retry, operation_id=operation_id, now=queue.now), owner_id="bob"
        )
    taken = queue.owners(queue.claim(10))
    assert Counter(taken) == {"alice": 5, "bob": 5}
    assert all(a != b for a, b in pairwise(taken)), taken


def test_a_retried_operation_held_for_later_takes_its_turn_when_it_joins(queue: Queue) -> None:
    """Cancelled before its time and retried, it keeps its time (``lifecycle.restart``) and
    its placeholder, which moves no owner's turn (ADR 56)."""
    (later,) = queue.create("bob", not_before=queue.now + timedelta(days=1))
    queue.db.run(partial(operations.cancel, operation_id=later, now=queue.now), owner_id="bob")
    queue.db.run(partial(operations.retry, operation_id=later, now=queue.now), owner_id="bob")
    tag = select(UserOperation.fair_tag).where(UserOperation.id == later)
    assert queue.db.run(lambda tx: tx.execute(tag).scalar(), owner_id=None) == fairness.HELD_TAG


def test_a_retried_operation_waits_again_at_its_own_priority(queue: Queue) -> None:
    """The levels a wait earned before a manual retry do not carry over, nor does the wait:
    a retry of work from a day ago went straight to the top of the line (ADR 65)."""
    (retried,) = queue.create("bob")
    (top,) = queue.create("alice", priority=5)
    queue.now += fairness.AGING_STEP * fairness.AGING_MAX
    assert queue.sweep().aged == 1  # bob's rose to alice's level
    queue.db.run(partial(operations.cancel, operation_id=retried, now=queue.now), owner_id="bob")
    queue.now += timedelta(days=1)
    queue.db.run(partial(operations.retry, operation_id=retried, now=queue.now), owner_id="bob")
    (middle,) = queue.create("carol", priority=3)
    assert queue.sweep().aged == 0  # below the top, none has waited: bob's neither
    assert queue.claim(3) == [top, middle, retried]


def test_an_automatic_retry_waits_in_line_from_when_it_is_due_again(queue: Queue) -> None:
    """The sweeper's requeue keeps the operation's levels and its turn (ADR 49) but not its
    first wait: aging counted the time it ran and waited for its retry as a wait in line,
    and the operator's queues said it had been due since it was created."""
    (retried,) = queue.create("bob")
    (claim,) = queue.db.run(lambda tx: operations.claim(tx, [TASK], 30, queue.now), owner_id=None)
    failed = operations.Settlement(
        "bob", retried, claim.lease_token, Event.FAIL_RETRYABLE, failure_code="busy"
    )
    queue.db.run(lambda tx: operations.settle(tx, [failed], queue.now), owner_id=None)
    queue.create("alice", priority=5)  # a level to rise to
    alice_due = queue.now
    queue.now += fairness.AGING_STEP * fairness.AGING_MAX  # its retry long due
    report = queue.sweep()
    assert (report.promoted, report.aged) == (1, 0)  # in line again, and no wait yet
    (depth,) = queue.db.run(lambda tx: store.queue_depths(OperatorTx(tx)), owner_id=None)
    assert depth.counts[OperationState.QUEUED] == 2
    assert depth.oldest_queued_at == alice_due  # not bob's, created before
    queue.now += fairness.AGING_STEP
    assert queue.sweep().aged == 1  # its wait in line counts from there: one level
    priority = select(UserOperation.priority).where(UserOperation.id == retried)
    assert queue.db.run(lambda tx: tx.execute(priority).scalar(), owner_id=None) == 1


def test_a_weight_of_two_gets_two_turns_for_one(queue: Queue) -> None:
    queue.db.run(lambda tx: shares.set_weight(tx, 2, set_by="ops", now=START), owner_id="alice")
    queue.create("alice", 40)
    queue.create("bob", 40)
    counts = Counter(queue.owners(queue.claim(30)))
    assert abs(counts["alice"] - 20) <= 1
    assert abs(counts["bob"] - 10) <= 1


def test_priorities_stay_strict_between_levels(queue: Queue) -> None:
    low = queue.create("bob", 3)
    high = queue.create("alice", 3, priority=5)
    assert queue.claim(6) == [*high, *low]


def test_an_owners_turns_at_one_priority_do_not_count_at_another(queue: Queue) -> None:
    """Its backlog at a high priority takes no turn at a low one: there its next operation
    starts at the head of the line, as an owner's with nothing waiting there."""
    low = queue.create("bob", 3)
    high = queue.create("alice", 5, priority=5)
    (alices_low,) = queue.create("alice")
    assert queue.claim(9) == [*high, low[0], alices_low, *low[1:]]


def test_aging_bounds_a_low_prioritys_wait(queue: Queue) -> None:
    (low,) = queue.create("bob", priority=0)
    for step in range(fairness.AGING_MAX):
        queue.create("alice", 2, priority=5)  # a stream of work five levels above
        assert queue.owners(queue.claim()) == ["alice"], step  # strict, until aged
        queue.now += fairness.AGING_STEP
        report = queue.db.run(lambda tx: operations.sweep(tx, queue.now), owner_id=None)
        assert report.aged == 1
    # Five steps waited: at alice's level now, with the oldest turn there.
    assert queue.claim() == [low]
    stored = queue.db.run(
        lambda tx: tx.execute(
            select(UserOperation.priority, UserOperation.base_priority).where(
                UserOperation.id == low
            )
        ).one(),
        owner_id=None,
    )
    assert tuple(stored) == (5, 0)


def test_a_wait_of_one_step_to_the_instant_rises_one_level_once(queue: Queue) -> None:
    (low,) = queue.create("bob")
    joined = queue.now  # its create's time: due, and waiting, from then
    queue.create("alice", priority=5)
    queue.now = joined + fairness.AGING_STEP - timedelta(microseconds=1)
    assert queue.sweep().aged == 0
    queue.now = joined + fairness.AGING_STEP
    assert queue.sweep().aged == 1
    assert queue.sweep().aged == 0  # risen already: a sweep in the same step writes nothing
    priority = select(UserOperation.priority).where(UserOperation.id == low)
    assert queue.db.run(lambda tx: tx.execute(priority).scalar(), owner_id=None) == 1


def _priorities(queue: Queue, *ids: str) -> list[int]:
    def read(tx: Tx) -> list[int]:
        found = select(UserOperation.id, UserOperation.priority).where(UserOperation.id.in_(ids))
        by_id = {row.id: row.priority for row in tx.execute(found)}
        return [by_id[operation_id] for operation_id in ids]

    return queue.db.run(read, owner_id=None)


def test_every_level_below_the_top_rises_and_none_beyond_the_highest_priority(
    queue: Queue,
) -> None:
    top = bounds.PRIORITY_RANGE[1]
    ids = [
        queue.create(owner, priority=level)[0]
        for owner, level in (("alice", top), ("bob", top - 2), ("carol", 0))
    ]
    queue.now += fairness.AGING_STEP * fairness.AGING_MAX
    assert queue.sweep().aged == 2
    assert _priorities(queue, *ids) == [top, top, fairness.AGING_MAX]


def test_only_operations_waiting_in_the_line_are_a_level_to_rise_to(queue: Queue) -> None:
    """Aging lifts work below the top of the claim's line: an operation held for later, one
    running and one ended are above nothing, and the ended one never rises."""
    (low,) = queue.create("bob")
    queue.create("carol", priority=9, not_before=queue.now + timedelta(days=1))
    queue.create("dave", priority=7)
    assert queue.owners(queue.claim()) == ["dave"]
    (ended,) = queue.create("erin", priority=-5)
    queue.db.run(partial(operations.cancel, operation_id=ended, now=queue.now), owner_id="erin")
    queue.now += fairness.AGING_STEP * fairness.AGING_MAX
    assert queue.sweep().aged == 0
    assert _priorities(queue, low, ended) == [0, -5]


def test_a_level_longer_than_a_sweeps_batch_rises_from_the_head_of_its_line(
    queue: Queue,
) -> None:
    queue.create("alice", priority=5)
    first, *_, last = queue.create("bob", ROWS_MAX + 1)
    queue.now += fairness.AGING_STEP * fairness.AGING_MAX
    assert queue.sweep().aged == ROWS_MAX
    assert _priorities(queue, first, last) == [5, 0]  # the last's turn is at the next sweep


def test_aging_is_bounded(queue: Queue) -> None:
    (low,) = queue.create("bob", priority=0)
    queue.create("alice", 1, priority=9)
    queue.now += fairness.AGING_STEP * 20
    queue.db.run(lambda tx: operations.sweep(tx, queue.now), owner_id=None)
    assert queue.owners(queue.claim()) == ["alice"]  # 0 + AGING_MAX < 9: still strict
    assert queue.claim() == [low]


def test_with_fairness_off_the_first_due_goes_first(services: Services) -> None:
    queue = Queue(services.db, fair=False)
    backlog = queue.create("alice", 20)
    late = queue.create("bob")
    assert queue.claim(21) == [*backlog, *late]


def test_opsctl_users_set_share(
    services: Services,
    db_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr("getpass.getuser", lambda: "ops.admin")
    assert cli.main(["users", "set-share", "erin", "3", "--database-url", db_url]) == 0
    out = capsys.readouterr().out
    assert out.startswith("erin: share 3 (set by ops.admin)")
    kept = select(OwnerShare.weight, OwnerShare.set_by)
    stored = services.db.run(
        lambda tx: tuple(tx.across_owners().execute(kept).one()), owner_id=None
    )
    assert stored == (3, "ops.admin")
    assert cli.main(["users", "set-share", "erin", "default", "--database-url", db_url]) == 0
    assert "share 1 (the default)" in capsys.readouterr().out
    for wrong in ("0", "101", "two", "-1"):
        assert cli.main(["users", "set-share", "erin", wrong, "--database-url", db_url]) == 2
        assert "WEIGHT must be `default` or a whole number" in capsys.readouterr().err
