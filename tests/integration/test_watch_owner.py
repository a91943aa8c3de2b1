"""``WatchOwner``: the owner's changes, each sent once it differs from what the watch sent
of that operation, oldest change first. It sees a change committed on another replica: no
event of this process reports it, so only the owners' shared poll
(``owner_changes.newest_among``) can."""

from __future__ import annotations

from datetime import timedelta
from functools import partial

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.operations.tuning import Tuning
from durable_ops.storage import operations, owner_changes
from durable_ops.storage.db import Database
from durable_ops.storage.owner_changes import CHANGES_MAX
from tests.support.clock import ManualClock
from tests.support.grpc_services import Services, running_services
from tests.support.later import later
from tests.support.operations_client import (
    ALICE,
    BOB,
    CANCELLED,
    FAILED,
    QUEUED,
    RUNNING,
    WAITING_FOR_RETRY,
    Lease,
    LeaseStream,
    OpsClient,
)

HANG_GUARD = 20.0


def test_a_change_made_on_another_replica_reaches_the_owners_watch(
    services: Services, other_replica: Services, ops: OpsClient, clock: ManualClock
) -> None:
    """The second change too: a poll after the first finds the owner's newest change moved
    (the first poll wakes the watch whatever it finds)."""
    elsewhere = OpsClient(other_replica)
    stream = ops.stub.WatchOwner(
        pb.WatchOwnerRequest(), metadata=ops.gateway(ALICE), timeout=HANG_GUARD
    )
    created: list[str] = []

    def create_elsewhere(key: str) -> None:
        elsewhere.create(BOB, f"not-alices-{key}")
        created.append(elsewhere.create(ALICE, key).id)

    try:
        with later(lambda: create_elsewhere("alices")):
            change = next(stream)
        assert [change.operation.id] == created
        assert services.operations_app.owners.polls >= 1  # found by the shared query
        clock.advance(1)
        with later(lambda: create_elsewhere("alices-again")):
            change = next(stream)
        assert change.operation.id == created[-1]
    finally:
        stream.cancel()


def _text(stream: LeaseStream, lease: Lease, text: str) -> None:
    stream.send(
        pb.HoldLeasesRequest(leases=[pb.HeldLease(operation_id=lease.id, answer_text=text)])
    )
    while stream.read().pushed:
        pass


def test_each_change_the_owner_sees_is_sent_and_a_plain_beat_is_not(
    services: Services, ops: OpsClient, clock: ManualClock
) -> None:
    """Progress, each growth of the answer so far, a cancel asked of the running attempt: each
    is sent. A plain beat moves the row's time and nothing the owner sees: a later read (the
    next change's, which reads two seconds back) does not send it, nor the operations it
    sent already. A watch resumed from the start replays the owner's operations oldest
    change first."""
    watch = ops.stub.WatchOwner(
        pb.WatchOwnerRequest(), metadata=ops.gateway(ALICE), timeout=HANG_GUARD
    )
    stream = ops.lease_stream()
    try:
        created = ops.create(ALICE, "watched")
        change = next(watch)
        assert (change.operation.id, change.operation.state) == (created.id, QUEUED)
        clock.advance(1)
        lease = ops.claim_one()
        assert next(watch).operation.state == RUNNING
        clock.advance(1)
        stream.beat((lease,))  # plain: the row's time moves, nothing else
        other = ops.create(ALICE, "other")
        assert next(watch).operation.id == other.id
        clock.advance(1)
        stream.beat(progress={lease.id: 40})
        assert next(watch).operation.progress_percent == 40
        for text in ('{"summary": "Str', '{"summary": "Strong fit"'):
            clock.advance(1)
            _text(stream, lease, text)
            assert next(watch).draft.text == text
        clock.advance(1)
        ops.cancel(ALICE, lease.id)
        change = next(watch)
        assert (change.operation.state, change.operation.cancel_requested) == (RUNNING, True)
        clock.advance(1)
        ops.cancel(ALICE, other.id)
        assert next(watch).operation.state == CANCELLED
    finally:
        watch.cancel()
        stream.close()

    replay = ops.stub.WatchOwner(
        pb.WatchOwnerRequest(after="0-0"), metadata=ops.gateway(ALICE), timeout=HANG_GUARD
    )
    try:
        assert [next(replay).operation.id for _ in range(2)] == [lease.id, other.id]
    finally:
        replay.cancel()


def test_more_changes_of_one_microsecond_than_a_read_takes_all_reach_the_watch(
    services: Services, ops: OpsClient
) -> None:
    """One UPDATE can move many of an owner's operations at one time (the sweep queues every
    due retry at once; here the test clock stands still). The watch reads ``CHANGES_MAX``
    at a time: it stepped a microsecond past a full read of one time and never sent the
    rest of that time's changes. Read from the start of time, and from now (that very
    microsecond: the first read, full, ends where the cursor is)."""
    created = {ops.create(ALICE, f"same-time-{n}").id for n in range(CHANGES_MAX + 20)}
    for after in ("0-0", ""):
        stream = ops.stub.WatchOwner(
            pb.WatchOwnerRequest(after=after), metadata=ops.gateway(ALICE), timeout=HANG_GUARD
        )
        seen: set[str] = set()
        try:
            while seen != created:
                seen.add(next(stream).operation.id)
        finally:
            stream.cancel()


def test_a_change_stamped_by_a_replica_whose_clock_lags_reaches_a_watch_from_now(
    db_url: str, services: Services, ops: OpsClient, clock: ManualClock
) -> None:
    """The watch reads ``WATCH_OVERLAP`` behind its cursor: a change a replica stamped a
    second earlier than the watch's own clock, committed after the watch began, is sent."""
    lagging = ManualClock(clock() - timedelta(seconds=1))
    with running_services(db_url, lagging) as behind:
        stream = ops.stub.WatchOwner(
            pb.WatchOwnerRequest(), metadata=ops.gateway(ALICE), timeout=HANG_GUARD
        )
        created: list[str] = []
        try:
            with later(lambda: created.append(OpsClient(behind).create(ALICE, "behind").id)):
                change = next(stream)
            assert [change.operation.id] == created
        finally:
            stream.cancel()


def test_a_retry_the_sweep_queues_again_is_sent(
    services: Services, ops: OpsClient, clock: ManualClock
) -> None:
    """Queued again by the sweep, the operation changes its state alone (its attempt is
    kept): that change is sent too."""
    watch = ops.stub.WatchOwner(
        pb.WatchOwnerRequest(), metadata=ops.gateway(ALICE), timeout=HANG_GUARD
    )
    try:
        created = ops.create(ALICE, "retried", max_attempts=2, retry_delay_seconds=1)
        assert next(watch).operation.state == QUEUED
        clock.advance(1)
        lease = ops.claim_one()
        assert next(watch).operation.state == RUNNING
        clock.advance(1)
        assert ops.fail(lease, retryable=True, code="model_busy") == WAITING_FOR_RETRY
        change = next(watch)
        assert (change.operation.id, change.operation.state) == (created.id, WAITING_FOR_RETRY)
        clock.advance(10)
        assert services.sweep().promoted == 1
        change = next(watch)
        assert (change.operation.state, change.operation.attempt) == (QUEUED, 1)
    finally:
        watch.cancel()


def test_the_poll_finds_the_newest_change_of_every_owner_it_asks_for(database: Database) -> None:
    """Asked in statements of ``OWNERS_PER_QUERY`` owners: the owners on either side of
    a statement's edge are each found, with their newest change, not an older one."""
    owners = [f"owner-{n:04}" for n in range(owner_changes.OWNERS_PER_QUERY + 1)]
    edge = owners[owner_changes.OWNERS_PER_QUERY - 1 :]
    start = ManualClock()()
    for n, owner in enumerate(edge):
        for key, at in (("older", start), ("newer", start + timedelta(seconds=1 + n))):
            request = operations.CreateRequest("strategy.snapshot", key, "job", f"job-{n}")
            database.run(partial(operations.create, request=request, now=at), owner_id=owner)
    found = database.run(
        lambda tx: owner_changes.newest_among(tx, owners), owner_id=None, write=False
    )
    assert found == {
        edge[0]: start + timedelta(seconds=1),
        edge[1]: start + timedelta(seconds=2),
    }


def test_moves_the_watch_reads_together_are_sent_by_what_they_changed(
    db_url: str, clock: ManualClock
) -> None:
    """Moves committed through another replica, whose commits this one finds only by its
    poll (not run here), reach the watch together with the next change made here: a new
    attempt's run differs from the run sent by its attempt alone, a failure after a retry
    from the failure sent by its finish alone; both are sent."""
    no_poll = Tuning(watch_interval_seconds=600.0)
    with (
        running_services(db_url, clock, tuning=no_poll) as here,
        running_services(db_url, clock, tuning=no_poll) as there,
    ):
        ops, elsewhere = OpsClient(here), OpsClient(there)
        watch = ops.stub.WatchOwner(
            pb.WatchOwnerRequest(), metadata=ops.gateway(ALICE), timeout=HANG_GUARD
        )
        try:
            runs_again = ops.create(ALICE, "runs-again", max_attempts=2, retry_delay_seconds=1)
            assert next(watch).operation.id == runs_again.id
            fails_again = ops.create(ALICE, "fails-again", max_attempts=1)
            assert next(watch).operation.id == fails_again.id
            first_run = ops.claim_one()
            assert (next(watch).operation.attempt, first_run.id) == (1, runs_again.id)
            first_failure = ops.claim_one()
            assert next(watch).operation.id == first_failure.id == fails_again.id
            assert ops.fail(first_failure, retryable=False) == FAILED
            failed = next(watch).operation
            assert failed.state == FAILED

            assert elsewhere.fail(first_run, retryable=True) == WAITING_FOR_RETRY
            clock.advance(10)
            assert there.sweep().promoted == 1
            assert elsewhere.claim_one().id == runs_again.id
            elsewhere.retry(ALICE, fails_again.id)
            assert elsewhere.fail(elsewhere.claim_one(), retryable=False) == FAILED
            woken = ops.create(ALICE, "wakes-the-watch")

            changes = {
                change.operation.id: change.operation for change in (next(watch) for _ in range(3))
            }
            assert set(changes) == {runs_again.id, fails_again.id, woken.id}
            assert (changes[runs_again.id].state, changes[runs_again.id].attempt) == (RUNNING, 2)
            assert changes[fails_again.id].state == FAILED
            assert changes[fails_again.id].finished_at != failed.finished_at
        finally:
            watch.cancel()
