"""``WatchOwner``: the owner's changes, each sent once it differs from what the watch sent
of that operation, oldest change first. It sees a change committed on another replica: no
event of this process reports it, so only the owners' shared poll
(``owner_changes.newest_among``) can."""

from __future__ import annotations

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.storage.owner_changes import CHANGES_MAX
from tests.support.clock import ManualClock
from tests.support.grpc_services import Services
from tests.support.later import later
from tests.support.operations_client import (
    ALICE,
    BOB,
    CANCELLED,
    QUEUED,
    RUNNING,
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
    rest of that time's changes."""
    created = {ops.create(ALICE, f"same-time-{n}").id for n in range(CHANGES_MAX + 20)}
    stream = ops.stub.WatchOwner(
        pb.WatchOwnerRequest(after="0-0"), metadata=ops.gateway(ALICE), timeout=HANG_GUARD
    )
    seen: set[str] = set()
    try:
        while seen != created:
            seen.add(next(stream).operation.id)
    finally:
        stream.cancel()
