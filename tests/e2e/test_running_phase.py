"""The running phase with the default 60-second lease, through two Operations replicas.

Real processes on loopback: two ``opsctl serve operations`` replicas behind
one round-robin target, the other services, the development model streaming
its answer at a slow pace, and one AI worker. Which replica holds the
worker's heartbeat stream is read from its ``lease_stream_opened`` log line.
Waits are generous hang guards; the latencies are measured in the benchmark.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import grpc
import pytest

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.api.operations.v1 import operations_pb2_grpc as pb_grpc
from durable_ops.stack.children import healthy
from tests.support.ai_stack import STRATEGY, AiStack, ai_stack, wait_for
from tests.support.ports import free_port

pytestmark = pytest.mark.slow

ALICE = "alice"
REPLICAS = ("operations", "operations-2")
RUNNING = pb.OPERATION_STATE_RUNNING
SUCCEEDED = pb.OPERATION_STATE_SUCCEEDED
CANCELLED = pb.OPERATION_STATE_CANCELLED


@contextmanager
def two_replicas(db_url: str, model_seconds: float) -> Iterator[tuple[AiStack, dict[str, str]]]:
    """The stack with a second Operations replica; (stack, replica label -> address)."""
    addresses = dict(zip(REPLICAS, (f"127.0.0.1:{free_port()}" for _ in REPLICAS), strict=True))
    with ai_stack(
        db_url,
        dev_model=True,
        worker=False,
        OPS_OPERATIONS_BIND=addresses["operations"],
        OPS_OPERATIONS_TARGET="ipv4:" + ",".join(addresses.values()),
        OPS_DEV_MODEL_SECONDS=str(model_seconds),
        OPS_WORKER_LEASE_SECONDS="60",  # the default: no test-sized lease hides a slow cancel
        OPS_WORKER_TASK_TIMEOUT_SECONDS="120",
    ) as stack:
        stack.stack.start_one(
            "operations",
            label="operations-2",
            extra_env={"OPS_OPERATIONS_BIND": addresses["operations-2"]},
        )
        wait_for(lambda: healthy(f"grpc:{addresses['operations-2']}"), timeout=60, what="replica")
        stack.start_worker()
        stack.wait_worker_event("ai_worker_started")
        yield stack, addresses


def _admitted(stack: AiStack) -> str:
    stack.entitle(ALICE)
    return stack.admit(ALICE, STRATEGY, stack.create_job(ALICE))


def _streams_opened(stack: AiStack, replica: str, operation_id: str) -> int:
    events = stack.logs.events(replica, "lease_stream_opened")
    return sum(event["operation_id"] == operation_id for event in events)


def _stream_holder(stack: AiStack, operation_id: str) -> str:
    """The replica on which the worker opened the operation's heartbeat stream."""
    return wait_for(
        lambda: next((r for r in REPLICAS if _streams_opened(stack, r, operation_id)), None),
        timeout=30,
        what="the worker's heartbeat stream",
    )


def _on(
    address: str, call: Callable[[pb_grpc.OperationsServiceStub], pb.Operation]
) -> pb.Operation:
    with grpc.insecure_channel(address) as channel:
        return call(pb_grpc.OperationsServiceStub(channel))


def _progress_seen(stack: AiStack, operation_id: str) -> int:
    return wait_for(
        lambda: stack.get(ALICE, operation_id).progress_percent,
        timeout=30,
        what="progress from the streamed answer",
    )


@pytest.mark.parametrize("cancel_through", ["holder", "other"])
def test_a_cancel_during_a_ten_second_inference_ends_cancelled_with_one_notification(
    db_url: str, cancel_through: str
) -> None:
    with two_replicas(db_url, model_seconds=10) as (stack, addresses):
        operation_id = _admitted(stack)
        holder = _stream_holder(stack, operation_id)
        assert 0 < _progress_seen(stack, operation_id) < 100

        replica = holder if cancel_through == "holder" else next(r for r in REPLICAS if r != holder)
        request = pb.CancelOperationRequest(operation_id=operation_id)
        asked = _on(
            addresses[replica], lambda s: s.CancelOperation(request, metadata=stack.md(ALICE))
        )
        assert (asked.state, asked.cancel_requested) == (RUNNING, True)

        # an inference of 10 s would have ended `succeeded` long before the first
        # regular heartbeat (every 20 s) could carry the cancel
        done = stack.wait_state(ALICE, operation_id, CANCELLED, timeout=8)
        assert done.attempt == 1
        assert stack.count_notifications(operation_id) == 1
        assert stack.count_notes(operation_id) == 0
        # The worker logs its ending once the acknowledgement's answer reaches it, a
        # moment after the state the test reads was committed.
        stack.wait_worker_event("operation_cancelled")
        if cancel_through == "holder":  # pushed on its stream at once, after the COMMIT
            assert stack.logs.events(holder, "cancel_pushed")
        # Through the other replica it reaches the holder by its watch (every 0.3 s) or by the
        # answer to the worker's next beat (the answer so far goes up every 0.25 s): either is
        # the lease channel, and the state above says it came long before a regular heartbeat.


def test_sigkill_of_the_replica_holding_the_stream_does_not_end_the_attempt(db_url: str) -> None:
    with two_replicas(db_url, model_seconds=12) as (stack, addresses):
        operation_id = _admitted(stack)
        holder = _stream_holder(stack, operation_id)
        _progress_seen(stack, operation_id)
        stack.stack.kill(holder)

        survivor = next(replica for replica in REPLICAS if replica != holder)
        wait_for(
            lambda: _streams_opened(stack, survivor, operation_id),
            timeout=30,
            what="the stream to move to the surviving replica",
        )
        stack.wait_worker_event("heartbeat_stream_reopened")
        request = pb.GetOperationRequest(operation_id=operation_id)

        def succeeded() -> pb.Operation | None:
            op = _on(
                addresses[survivor], lambda s: s.GetOperation(request, metadata=stack.md(ALICE))
            )
            return op if op.state == SUCCEEDED else None

        done = wait_for(succeeded, timeout=60, what="the operation to succeed")
        assert done.attempt == 1
        assert stack.count_notes(operation_id) == 1
        assert stack.count_notifications(operation_id) == 1
        assert not stack.worker_events("lease_lost")
