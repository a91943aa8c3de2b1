"""The live lease channel through real servers, on both engines.

Pushed cancels (same replica and through another one), waiting claims, and
notes fenced by the lease. Two replicas are two servers on one database.
Timeouts here only keep a broken build from hanging; nothing is timed.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import grpc
import pytest
from sqlalchemy import select

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.api.workspace.v1 import workspace_pb2 as wpb
from durable_ops.model.scope import Role
from durable_ops.operations.watch import CANCEL
from durable_ops.storage.schema import AiWorkspaceNote
from tests.support.ai_stack import wait_for
from tests.support.clock import ManualClock
from tests.support.grpc_services import Services
from tests.support.operations_client import (
    ALICE,
    CANCELLED,
    LEASE_SECONDS,
    RUNNING,
    TASK,
    Lease,
    OpsClient,
    expect_failure,
)
from tests.support.stored import rows

HANG_GUARD = 20.0
ABORTED = grpc.StatusCode.ABORTED


def _claimed(ops: OpsClient, key: str) -> Lease:
    ops.create(ALICE, key, subject_id=f"job-{key}")
    return ops.claim_one()


# ---- pushed cancels ------------------------------------------------------------------------


def test_a_cancel_is_pushed_to_the_open_stream_without_a_beat(
    services: Services, pool: ThreadPoolExecutor
) -> None:
    ops = OpsClient(services)
    lease = _claimed(ops, "push-here")
    stream = ops.stream(lease)
    assert stream.beat(progress=5).cancel_requested is False
    pushed: Future[pb.HeartbeatResponse] = pool.submit(stream.read)

    assert ops.cancel(ALICE, lease.id).cancel_requested is True
    message = pushed.result(HANG_GUARD)
    assert (message.pushed, message.cancel_requested) == (True, True)

    stream.close()
    assert ops.acknowledge_cancel(lease) == CANCELLED


def test_a_cancel_taken_by_another_replica_reaches_the_stream_through_the_shared_poll(
    services: Services, other_replica: Services, pool: ThreadPoolExecutor
) -> None:
    holder = OpsClient(services)
    lease = _claimed(holder, "push-there")
    stream = holder.stream(lease)
    stream.beat()
    pushed: Future[pb.HeartbeatResponse] = pool.submit(stream.read)
    polls_before = services.operations_app.watch.polls

    assert OpsClient(other_replica).cancel(ALICE, lease.id).cancel_requested is True
    message = pushed.result(HANG_GUARD)
    assert (message.pushed, message.cancel_requested) == (True, True)
    assert services.operations_app.watch.polls > polls_before
    stream.close()


def test_the_cancel_poll_asks_once_for_every_open_stream(
    services: Services, other_replica: Services
) -> None:
    ops = OpsClient(services)
    leases = [_claimed(ops, f"many-{index}") for index in range(20)]
    streams = [ops.stream(lease) for lease in leases]
    for stream in streams:
        stream.beat()
    watch = services.operations_app.watch
    statements: list[str] = []
    lock = threading.Lock()

    def count(*args: Any) -> None:
        with lock:
            statements.append(args[2])

    services.db.listen("before_cursor_execute", count)
    try:
        first, first_tick = watch.polls, watch.ticks
        wait_for(lambda: watch.polls >= first + 4, timeout=HANG_GUARD)
        window, ticks = watch.polls - first, watch.ticks - first_tick
    finally:
        services.db.unlisten("before_cursor_execute", count)
    selects = [text for text in statements if "cancel_requested" in text]
    # one query per poll, never one per stream (a poll may straddle the window's edges)
    assert window <= len(selects) <= window + 1
    # streams' cancels are asked every third tick only (figure 8's statements per second)
    assert ticks >= CANCEL.every_ticks * (window - 1) > window
    for stream in streams:
        stream.close()


# ---- waiting claims --------------------------------------------------------------------------


def test_a_waiting_claim_answers_as_soon_as_work_is_created(
    services: Services, pool: ThreadPoolExecutor
) -> None:
    ops = OpsClient(services)
    waiting = pool.submit(lambda: ops.claim(wait_seconds=HANG_GUARD))
    wait_for(lambda: services.operations_app.claims.waiting_count, timeout=HANG_GUARD)
    created = ops.create(ALICE, "wake-here")

    lease = waiting.result(HANG_GUARD)
    assert lease is not None
    assert lease.id == created.id
    assert ops.get(ALICE, created.id).state == RUNNING


def test_a_waiting_claim_finds_work_created_through_another_replica(
    services: Services, other_replica: Services, pool: ThreadPoolExecutor
) -> None:
    ops = OpsClient(services)
    waiting = pool.submit(lambda: ops.claim(wait_seconds=HANG_GUARD))
    wait_for(lambda: services.operations_app.claims.waiting_count, timeout=HANG_GUARD)
    created = OpsClient(other_replica).create(ALICE, "wake-there")

    lease = waiting.result(HANG_GUARD)
    assert lease is not None
    assert lease.id == created.id


def test_a_waiting_claim_answers_nothing_when_the_wait_is_over(services: Services) -> None:
    ops = OpsClient(services)
    ops.create(ALICE, "other-kind", task_type="cv.review", subject_type="attachment")
    assert ops.claim((TASK,), wait_seconds=0.3) is None  # work of another kind never wakes it


@pytest.mark.parametrize("seconds", [-1, 21])
def test_a_claim_wait_out_of_bounds_is_refused(services: Services, seconds: int) -> None:
    ops = OpsClient(services)
    expect_failure(
        lambda: ops.claim(wait_seconds=seconds),
        grpc.StatusCode.INVALID_ARGUMENT,
        "invalid_argument",
        field="wait",
    )


# ---- notes fenced by the lease -----------------------------------------------------------------


def _publish(services: Services, ops: OpsClient, lease: Lease, body: str) -> Any:
    request = wpb.PublishNoteRequest(
        kind=TASK,
        subject_type="job",
        subject_id=lease.operation.subject.id,
        operation_id=lease.id,
        lease_token=lease.token,
        body_json=body,
    )
    return services.workspace.PublishNote(request, metadata=ops.md(Role.WORKER, lease.owner))


def _notes(services: Services) -> list[tuple[str | None, str]]:
    found = rows(services.db, select(AiWorkspaceNote.operation_id, AiWorkspaceNote.body))
    return [(row.operation_id, row.body) for row in found]


def test_an_attempt_that_lost_its_lease_cannot_publish(
    services: Services, clock: ManualClock
) -> None:
    ops = OpsClient(services)
    stale = _claimed(ops, "takeover")
    clock.advance(LEASE_SECONDS + 1)
    assert services.sweep().expired_leases == 1
    clock.advance(3600)
    services.sweep()  # the retry is due: queued again
    holder = ops.claim_one()
    assert (holder.id, holder.operation.attempt) == (stale.id, 2)

    expect_failure(
        lambda: _publish(services, ops, stale, '{"from":"stale"}'), ABORTED, "lease_lost"
    )
    assert _publish(services, ops, holder, '{"from":"holder"}').published is True
    assert ops.complete(holder) == pb.OPERATION_STATE_SUCCEEDED
    assert _notes(services) == [(holder.id, '{"from":"holder"}')]


def test_a_cancel_wins_until_the_note_is_published(services: Services) -> None:
    ops = OpsClient(services)
    lease = _claimed(ops, "cancel-first")
    ops.cancel(ALICE, lease.id)

    expect_failure(
        lambda: _publish(services, ops, lease, '{"late":true}'), ABORTED, "cancel_requested"
    )
    assert _notes(services) == []
    assert ops.acknowledge_cancel(lease) == CANCELLED


def test_a_cancel_after_the_note_is_published_comes_too_late(services: Services) -> None:
    ops = OpsClient(services)
    lease = _claimed(ops, "cancel-late")
    assert _publish(services, ops, lease, '{"done":true}').published is True
    ops.cancel(ALICE, lease.id)

    assert ops.complete(lease) == pb.OPERATION_STATE_SUCCEEDED
    done = ops.get(ALICE, lease.id)
    assert (done.state, done.cancel_requested) == (pb.OPERATION_STATE_SUCCEEDED, True)


@pytest.mark.parametrize(("token", "field"), [("", "lease_token"), ("x" * 129, "lease_token")])
def test_a_publish_without_a_usable_lease_token_is_refused(
    services: Services, token: str, field: str
) -> None:
    ops = OpsClient(services)
    lease = _claimed(ops, f"bad-token-{len(token)}")
    forged = Lease(lease.operation, lease.owner, token)
    expect_failure(
        lambda: _publish(services, ops, forged, "{}"),
        grpc.StatusCode.INVALID_ARGUMENT,
        "invalid_argument",
        field=field,
    )
    assert _notes(services) == []
