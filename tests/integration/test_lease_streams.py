"""One lease stream per worker (``HoldLeases``, ADR 0026) through real servers, on both engines.

A worker's one stream holds leases of many owners: each beat extends them all
with one UPDATE, each lease is answered alone (a stale or foreign one is
refused and leaves the stream, the rest stay held), and the owner's cancel is
pushed per lease from whichever replica took it. Timeouts only keep a broken
build from hanging.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import grpc

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.model.held_leases import LEASE_NOT_HELD, NAMED_TWICE
from tests.support.clock import ManualClock
from tests.support.grpc_services import Services
from tests.support.operations_client import (
    ALICE,
    BOB,
    CANCELLED,
    OWNER_IDS,
    RUNNING,
    Lease,
    LeaseStream,
    OpsClient,
    expect_failure,
    failure_of,
)

HANG_GUARD = 20.0
OK = 0
ABORTED = grpc.StatusCode.ABORTED.value[0]
NOT_FOUND = grpc.StatusCode.NOT_FOUND.value[0]
INVALID = grpc.StatusCode.INVALID_ARGUMENT


def _claimed(ops: OpsClient, count: int) -> list[Lease]:
    """``count`` running operations spread over the owners."""
    for n in range(count):
        ops.create(OWNER_IDS[n % len(OWNER_IDS)], f"held-{n}", subject_id=f"s-{n}")
    return [ops.claim_one() for _ in range(count)]


CLAIM_POLL = "SELECT DISTINCT user_operations.state, user_operations.task_type FROM"


class Statements:
    """The SQL an engine runs while counting (every thread: the servers run on their own)."""

    def __init__(self, services: Services) -> None:
        self._db = services.db
        self._lock = threading.Lock()
        self.seen: list[str] = []

    def _record(self, *args: Any) -> None:
        with self._lock:
            self.seen.append(" ".join(str(args[2]).split()))

    def __enter__(self) -> Statements:
        self._db.listen("before_cursor_execute", self._record)
        return self

    def __exit__(self, *exc: object) -> None:
        self._db.unlisten("before_cursor_execute", self._record)

    def of_the_beat(self) -> list[str]:
        """Reads and writes of operations, but the servers' background polls: the cancel
        watch's, and the claim poll's query of claimable kinds (a claim of another test
        of the module may still wait)."""
        return [
            text
            for text in self.seen
            if "user_operations" in text
            and not (text.startswith("SELECT user_operations.id FROM") and "cancel" in text)
            and not text.startswith(CLAIM_POLL)
        ]


def test_one_stream_holds_leases_of_many_owners_with_one_update_per_beat(
    services: Services, clock: ManualClock
) -> None:
    ops = OpsClient(services)
    leases = _claimed(ops, 12)
    stream = ops.lease_stream()
    first = stream.beat(tuple(leases))
    assert {outcome.status_code for outcome in first.values()} == {OK}
    assert set(first) == {lease.id for lease in leases}

    later = clock.advance(20)
    with Statements(services) as statements:
        beat = stream.beat()
    assert statements.of_the_beat() == [statements.of_the_beat()[0]]
    assert statements.of_the_beat()[0].startswith("UPDATE user_operations SET")
    for lease in leases:
        assert beat[lease.id].lease_expires_at.ToDatetime() == (
            later + timedelta(seconds=30)
        ).replace(tzinfo=None)
        assert ops.row(lease.id).lease_expires_at == later + timedelta(seconds=30)
    stream.close()


def test_a_stale_or_foreign_lease_is_refused_alone_and_leaves_the_stream(
    services: Services, clock: ManualClock
) -> None:
    ops = OpsClient(services)
    good, stale, foreign, expiring = _claimed(ops, 4)
    stream = ops.lease_stream()
    stream.beat((good, expiring), lease_seconds=60)
    stream.beat((expiring,), lease_seconds=5)  # held, now for five seconds a beat
    clock.advance(10)  # ``expiring`` ran out; the others have 50 s left
    stale_token = Lease(stale.operation, stale.owner, "not-the-token-" + "x" * 30)
    other_owner = BOB if foreign.owner != BOB else ALICE
    posing = Lease(foreign.operation, other_owner, foreign.token)
    missing = Lease(pb.Operation(id="f" * 32), ALICE, "some-token-" + "y" * 30)
    with Statements(services) as statements:
        outcomes = stream.beat((stale_token, posing, missing))
    assert outcomes[good.id].status_code == OK
    assert (outcomes[stale.id].status_code, outcomes[stale.id].error_code) == (
        ABORTED,
        "lease_lost",
    )
    # Another owner's operation is not found, whatever the token: existence does not leak.
    assert (outcomes[foreign.id].status_code, outcomes[foreign.id].error_code) == (
        NOT_FOUND,
        "operation_not_found",
    )
    assert outcomes["f" * 32].status_code == NOT_FOUND
    assert (outcomes[expiring.id].status_code, outcomes[expiring.id].error_code) == (
        ABORTED,
        "lease_lost",
    )
    # One UPDATE, one read of the rows that said why; nothing else written.
    verbs = [text.split()[0] for text in statements.of_the_beat()]
    assert verbs == ["UPDATE", "SELECT"], statements.of_the_beat()
    # The refused and the lost left the stream; the good one is held still.
    assert set(stream.beat()) == {good.id}
    assert ops.row(foreign.id).lease_expires_at is not None
    assert ops.get(foreign.owner, foreign.id).state == RUNNING
    stream.close()


def test_the_owners_cancel_is_pushed_for_that_lease_alone(
    services: Services, pool: ThreadPoolExecutor
) -> None:
    ops = OpsClient(services)
    leases = _claimed(ops, 3)
    target = leases[1]
    stream = ops.lease_stream()
    stream.beat(tuple(leases))
    pushed: Future[pb.HoldLeasesResponse] = pool.submit(stream.read)

    assert ops.cancel(target.owner, target.id).cancel_requested is True
    message = pushed.result(HANG_GUARD)
    assert message.pushed  # at once, not on the next beat (figure 8 times it)
    assert [(o.operation_id, o.cancel_requested) for o in message.outcomes] == [(target.id, True)]

    # The next beats still extend it (until acknowledged) and say so; no second push.
    beat = stream.beat()
    assert beat[target.id].cancel_requested is True
    assert beat[target.id].status_code == OK
    assert not any(beat[lease.id].cancel_requested for lease in leases if lease != target)
    assert stream.pushed == []
    assert ops.acknowledge_cancel(target) == CANCELLED
    assert beat.keys() == {lease.id for lease in leases}
    after = stream.beat()
    assert after[target.id].status_code == ABORTED  # acknowledged: the lease is over
    assert set(stream.beat()) == {lease.id for lease in leases if lease != target}
    stream.close()


def test_a_cancel_taken_by_another_replica_is_pushed_through_the_shared_poll(
    services: Services, other_replica: Services, pool: ThreadPoolExecutor
) -> None:
    ops = OpsClient(services)
    leases = _claimed(ops, 2)
    stream = ops.lease_stream()
    stream.beat(tuple(leases))
    pushed: Future[pb.HoldLeasesResponse] = pool.submit(stream.read)

    OpsClient(other_replica).cancel(leases[0].owner, leases[0].id)
    message = pushed.result(HANG_GUARD)
    assert message.pushed
    assert [o.operation_id for o in message.outcomes if o.cancel_requested] == [leases[0].id]
    stream.close()


def test_a_lease_added_after_its_cancel_is_told_in_the_answer_not_pushed(
    services: Services, clock: ManualClock
) -> None:
    ops = OpsClient(services)
    (lease,) = _claimed(ops, 1)
    ops.cancel(lease.owner, lease.id)
    clock.advance(1)
    stream = ops.lease_stream()
    with Statements(services) as statements:
        outcome = stream.beat((lease,))[lease.id]
    assert (outcome.status_code, outcome.cancel_requested) == (OK, True)
    # The common UPDATE skips a cancelled row; the read says why, a second UPDATE extends it.
    verbs = [text.split()[0] for text in statements.of_the_beat()]
    assert verbs == ["UPDATE", "SELECT", "UPDATE"], statements.of_the_beat()
    assert ops.row(lease.id).lease_expires_at == services.clock() + timedelta(seconds=30)
    stream.close()
    assert stream.pushed == []


def test_progress_reaches_the_owner_and_a_dropped_lease_is_no_longer_extended(
    services: Services, clock: ManualClock
) -> None:
    ops = OpsClient(services)
    kept, dropped = _claimed(ops, 2)
    stream = ops.lease_stream()
    stream.beat((kept, dropped), progress={kept.id: 10})
    assert ops.get(kept.owner, kept.id).progress_percent == 10
    assert stream.beat(progress={kept.id: 40, dropped.id: 25}).keys() == {kept.id, dropped.id}
    assert ops.get(kept.owner, kept.id).progress_percent == 40
    assert ops.get(dropped.owner, dropped.id).progress_percent == 25

    held_until = ops.row(dropped.id).lease_expires_at
    clock.advance(5)
    assert set(stream.beat(dropped=(dropped.id,))) == {kept.id}
    assert ops.row(dropped.id).lease_expires_at == held_until
    assert ops.get(kept.owner, kept.id).progress_percent == 40  # a beat without progress keeps it
    stream.close()


def test_a_broken_stream_is_reopened_with_the_same_leases_on_another_replica(
    services: Services, other_replica: Services, clock: ManualClock
) -> None:
    ops = OpsClient(services)
    leases = _claimed(ops, 3)
    broken = ops.lease_stream()
    broken.beat(tuple(leases))
    call: Any = broken._responses
    call.cancel()  # the connection went away mid-stream

    clock.advance(10)
    reopened = OpsClient(other_replica).lease_stream()
    outcomes = reopened.beat(tuple(leases))
    assert {outcome.status_code for outcome in outcomes.values()} == {OK}
    for lease in leases:
        assert ops.row(lease.id).lease_expires_at == clock() + timedelta(seconds=30)
    reopened.close()


def _stream_failure(stream: LeaseStream, request: pb.HoldLeasesRequest) -> Any:
    stream.send(request)
    try:
        stream.read()
    except grpc.RpcError as error:
        return failure_of(error)
    raise AssertionError("the stream was expected to end with an error")


def test_bad_entries_are_refused_alone_and_a_bad_request_ends_the_stream_clearly(
    services: Services,
) -> None:
    ops = OpsClient(services)
    good, other = _claimed(ops, 2)
    stream = ops.lease_stream()
    too_long = stream.beat((good,), lease_seconds=601)[good.id]
    assert (too_long.status_code, too_long.error_code) == (INVALID.value[0], "invalid_argument")
    assert "lease_seconds" in too_long.message
    assert stream.beat((good,))[good.id].status_code == OK
    wrong_progress = stream.beat(progress={good.id: 101})[good.id]
    assert wrong_progress.status_code == INVALID.value[0]
    not_held = stream.beat(progress={other.id: 5})[other.id]
    assert (not_held.status_code, not_held.error_code) == (INVALID.value[0], LEASE_NOT_HELD)
    assert stream.beat() == {}  # both refused entries left the stream

    twice = pb.HoldLeasesRequest(
        leases=[pb.HeldLease(operation_id=good.id)] * 2,
    )
    failure = _stream_failure(ops.lease_stream(), twice)
    assert (failure.code, failure.error_code) == (INVALID, NAMED_TWICE)
    nameless = pb.HoldLeasesRequest(leases=[pb.HeldLease(owner_id=ALICE, lease_token="t" * 40)])
    failure = _stream_failure(ops.lease_stream(), nameless)
    assert (failure.code, failure.error_field) == (INVALID, "operation_id")
    stream.close()


def test_only_the_neutral_worker_scope_may_hold_leases(services: Services) -> None:
    ops = OpsClient(services)
    (lease,) = _claimed(ops, 1)
    denied = grpc.StatusCode.PERMISSION_DENIED
    for md in (ops.gateway(ALICE), ops.worker_for(ALICE)):
        stream = ops.lease_stream(md)
        expect_failure(lambda stream=stream: stream.beat((lease,)), denied)  # type: ignore[misc]
    assert ops.row(lease.id).lease_expires_at == services.clock() + timedelta(seconds=30)


def test_a_new_lease_of_an_operation_gets_its_own_push_on_the_same_stream(
    services: Services, pool: ThreadPoolExecutor
) -> None:
    ops = OpsClient(services)
    (first,) = _claimed(ops, 1)
    stream = ops.lease_stream()
    stream.beat((first,))
    pushed: Future[pb.HoldLeasesResponse] = pool.submit(stream.read)
    ops.cancel(first.owner, first.id)
    assert pushed.result(HANG_GUARD).outcomes[0].operation_id == first.id
    ops.acknowledge_cancel(first)
    ops.retry(first.owner, first.id)
    second = ops.claim_one()
    assert (second.id, second.token != first.token) == (first.id, True)

    assert stream.beat((second,))[second.id].cancel_requested is False
    pushed = pool.submit(stream.read)
    ops.cancel(second.owner, second.id)
    message = pushed.result(HANG_GUARD)
    assert [(o.operation_id, o.cancel_requested) for o in message.outcomes] == [(second.id, True)]
    stream.close()
