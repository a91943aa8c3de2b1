"""``WaitOperation`` of our own API: a long-poll that answers when the operation moves.

Given the ``updated_at`` the caller saw, any change answers: a claim, a
progress beat, a cancel request, the end; through this replica at once, through
another by the shared watch. Without it a change of state answers (SPEC §5, as the
HTTP long-poll this call serves), and the end. The servers'
clock is moved by hand before each change, so every change has its own
``updated_at``. Timeouts here only keep a broken build from hanging.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from datetime import timedelta

import grpc
import pytest

from durable_ops.api.operations.v1 import operations_pb2 as pb
from tests.support.clock import ManualClock
from tests.support.grpc_services import Services, running_services
from tests.support.later import later
from tests.support.operations_client import ALICE, BOB, OpsClient

HANG_GUARD = 20.0


@pytest.fixture
def elsewhere(db_url: str, clock: ManualClock, services: Services) -> Iterator[OpsClient]:
    with running_services(db_url, clock) as running:
        yield OpsClient(running)


def _wait(
    ops: OpsClient, seen: pb.Operation | None, seconds: float, *, operation_id: str = ""
) -> pb.Operation:
    request = pb.WaitOperationRequest(operation_id=operation_id or (seen.id if seen else ""))
    request.timeout.FromTimedelta(timedelta(seconds=seconds))
    if seen is not None:
        request.seen_updated_at.CopyFrom(seen.updated_at)
    answer: pb.Operation = ops.stub.WaitOperation(
        request, metadata=ops.gateway(ALICE), timeout=seconds + HANG_GUARD
    )
    return answer


def _later(clock: ManualClock, action: Callable[[], object]) -> AbstractContextManager[None]:
    """``action`` on another thread, the servers' clock a second on first."""

    def moved_on() -> None:
        clock.advance(1)
        action()

    return later(moved_on)


def test_a_claim_answers_a_wait_from_the_queued_version(ops: OpsClient, clock: ManualClock) -> None:
    queued = ops.create(ALICE, "wait-claim")
    with _later(clock, ops.claim_one):
        moved = _wait(ops, queued, HANG_GUARD)
    assert moved.state == pb.OPERATION_STATE_RUNNING


def test_progress_answers_through_this_replica_and_through_another(
    ops: OpsClient, elsewhere: OpsClient, clock: ManualClock
) -> None:
    ops.create(ALICE, "wait-progress")
    lease = ops.claim_one()
    running = ops.get(ALICE, lease.id)
    with _later(clock, lambda: ops.heartbeat_once(lease, progress=40)):
        here = _wait(ops, running, HANG_GUARD)
    assert here.progress_percent == 40
    with _later(clock, lambda: elsewhere.heartbeat_once(lease, progress=70)):
        there = _wait(ops, here, HANG_GUARD)
    assert there.progress_percent == 70


def test_an_unchanged_operation_answers_at_the_timeout_as_it_is(
    ops: OpsClient,
) -> None:
    queued = ops.create(ALICE, "wait-still")
    started = time.monotonic()
    answer = _wait(ops, queued, 0.3)
    assert time.monotonic() - started >= 0.3
    assert answer == queued


def test_a_version_already_gone_answers_at_once(ops: OpsClient, clock: ManualClock) -> None:
    queued = ops.create(ALICE, "wait-stale")
    clock.advance(1)
    lease = ops.claim_one()
    answer = _wait(ops, queued, HANG_GUARD)
    assert answer.state == pb.OPERATION_STATE_RUNNING
    assert answer.id == lease.id


def test_without_a_seen_version_a_change_of_state_answers(
    ops: OpsClient, elsewhere: OpsClient, clock: ManualClock
) -> None:
    """A claim through another replica: found by the shared watch's query."""
    queued = ops.create(ALICE, "wait-start")
    with _later(clock, elsewhere.claim_one):  # 0.3 s on
        started = _wait(ops, None, 3.0, operation_id=queued.id)
    assert started.state == pb.OPERATION_STATE_RUNNING  # the claim answered, not the timeout


def test_without_a_seen_version_a_move_within_its_state_does_not_answer(
    ops: OpsClient, clock: ManualClock
) -> None:
    queued = ops.create(ALICE, "wait-end")
    lease = ops.claim_one()

    def beat_then_cancel() -> None:
        ops.heartbeat_once(lease, progress=50)  # a move: not what this wait waits for
        clock.advance(1)
        ops.cancel(ALICE, lease.id)
        clock.advance(1)
        ops.acknowledge_cancel(lease)

    with _later(clock, beat_then_cancel):
        done = _wait(ops, None, HANG_GUARD, operation_id=queued.id)
    assert done.state == pb.OPERATION_STATE_CANCELLED


def test_another_owner_and_a_bad_request_are_refused(ops: OpsClient) -> None:
    queued = ops.create(ALICE, "wait-scope")
    request = pb.WaitOperationRequest(operation_id=queued.id)
    with pytest.raises(grpc.RpcError) as foreign:
        ops.stub.WaitOperation(request, metadata=ops.gateway(BOB), timeout=HANG_GUARD)
    assert foreign.value.code() == grpc.StatusCode.NOT_FOUND
    request.timeout.seconds = -1
    with pytest.raises(grpc.RpcError) as negative:
        ops.stub.WaitOperation(request, metadata=ops.gateway(ALICE), timeout=HANG_GUARD)
    assert negative.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    request.ClearField("timeout")
    request.seen_updated_at.nanos = -5
    with pytest.raises(grpc.RpcError) as bad_seen:
        ops.stub.WaitOperation(request, metadata=ops.gateway(ALICE), timeout=HANG_GUARD)
    assert bad_seen.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_a_wait_that_answered_leaves_nothing_watched(
    services: Services, ops: OpsClient, clock: ManualClock
) -> None:
    """Its watch goes with its call, answered by a move or by its timeout: the replica's
    shared poll stops once no call waits, and never asks, wait after wait, about every
    operation ever waited on."""
    queued = ops.create(ALICE, "wait-gone")
    with _later(clock, ops.claim_one):
        _wait(ops, queued, HANG_GUARD)
    _wait(ops, None, 0.1, operation_id=queued.id)
    assert not services.operations_app.watch._waiting()
