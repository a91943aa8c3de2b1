"""A service key holds at most its bound of long-lived calls open (``rpc.open_calls``): a
stolen worker or producer key cannot pile up claim waits, lease streams and waits.

Real gRPC servers (``running_services``) with a small bound; each call is held open by
the client, and the test waits until the server counts it before going on.
"""

from __future__ import annotations

import secrets
import shutil
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import grpc
import pytest
from google.longrunning import operations_pb2_grpc as lro_grpc
from google.longrunning import operations_proto_pb2 as lro

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.api.operations.v1 import operations_pb2_grpc as pb_grpc
from durable_ops.model.scope import Role
from durable_ops.rpc.credentials import mint_service_token
from durable_ops.rpc.keys import PUBLIC_DIR, SigningKey, create_key_pair
from durable_ops.rpc.open_calls import TOO_MANY_OPEN_CALLS, OpenCalls
from tests.support.clock import ManualClock
from tests.support.grpc_services import Services, running_services
from tests.support.keys import keys_dir, trusted
from tests.support.operations_client import (
    ALICE,
    LeaseStream,
    Metadata,
    OpsClient,
    expect_failure,
)

BOUND = 3
IDLE_TASK = "caps.idle"  # nobody creates one: every claim of it waits
WAIT_SECONDS = 20  # the longest a claim may wait: longer than the test needs
COUNTED_WITHIN_SECONDS = 30.0  # generous: a bound for a loaded machine, not a measure
EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED


@pytest.fixture(scope="module")
def second_worker_key() -> Iterator[SigningKey]:
    """A worker key of its own (``opsctl keys issue``), trusted by the test servers."""
    name = f"worker-caps-{secrets.token_hex(3)}"
    key = SigningKey.load(create_key_pair(keys_dir(), name))
    deadline = time.monotonic() + COUNTED_WITHIN_SECONDS
    while trusted().find(key.kid) is None:  # the servers read the folder every second
        assert time.monotonic() < deadline, "the new key was never trusted"
        time.sleep(0.05)
    yield key
    shutil.rmtree(keys_dir() / name, ignore_errors=True)
    (keys_dir() / PUBLIC_DIR / f"{name}.pub").unlink(missing_ok=True)


def _bearer(key: SigningKey) -> Metadata:
    return (("authorization", f"Bearer {mint_service_token(key)}"),)


def _claim_request(wait_seconds: float) -> pb.ClaimOperationsRequest:
    request = pb.ClaimOperationsRequest(task_types=[IDLE_TASK], lease_seconds=30, max_operations=1)
    request.wait.FromTimedelta(timedelta(seconds=wait_seconds))
    return request


def _waiting_claim(channel: grpc.Channel, md: Metadata) -> Any:
    """A claim that waits, open until it is cancelled or its channel closes."""
    stub = pb_grpc.OperationsServiceStub(channel)
    return stub.ClaimOperations.future(
        _claim_request(WAIT_SECONDS), metadata=md, timeout=WAIT_SECONDS + 30
    )


def _stream_of(method: Any, md: Metadata) -> object:
    """The first answer of a lease stream that sends nothing."""
    return next(method(iter(()), metadata=md))


def _until_counted(services: Services, key_name: str, count: int) -> None:
    deadline = time.monotonic() + COUNTED_WITHIN_SECONDS
    while services.open_calls.held(key_name) != count:
        held = services.open_calls.held(key_name)
        assert time.monotonic() < deadline, f"{key_name} holds {held} calls, not {count}"
        time.sleep(0.02)


def _refused(call: Callable[[], object]) -> None:
    failure = expect_failure(call, EXHAUSTED, TOO_MANY_OPEN_CALLS)
    assert failure.trailers.get("x-retry-after") == "1", failure


@pytest.mark.parametrize("ending", ["cancelled", "disconnected"])
def test_one_key_holds_at_most_its_bound_of_claim_waits(
    db_url: str, second_worker_key: SigningKey, ending: str
) -> None:
    with running_services(db_url, ManualClock(), open_calls=OpenCalls(per_key=BOUND)) as services:
        ops = OpsClient(services)
        channel = grpc.insecure_channel(services.target)
        try:
            waits = [_waiting_claim(channel, ops.neutral) for _ in range(BOUND)]
            _until_counted(services, "worker", BOUND)

            # One more claim, waiting or not, or a lease stream of the same key: refused.
            _refused(
                lambda: ops.stub.ClaimOperations(_claim_request(WAIT_SECONDS), metadata=ops.neutral)
            )
            _refused(lambda: ops.stub.ClaimOperations(_claim_request(0), metadata=ops.neutral))
            _refused(lambda: _stream_of(ops.stub.HoldLeases, ops.neutral))

            # Another worker key is counted alone.
            other = _bearer(second_worker_key)
            answer = ops.stub.ClaimOperations(_claim_request(0), metadata=other)
            assert list(answer.claimed) == []

            if ending == "cancelled":
                for wait in waits:
                    assert wait.cancel()
            else:
                channel.close()
            _until_counted(services, "worker", 0)
        finally:
            channel.close()

        # The key has its slots back: as many waits as before are taken, and no more.
        again = [_waiting_claim(services.channel, ops.neutral) for _ in range(BOUND)]
        _until_counted(services, "worker", BOUND)
        _refused(lambda: ops.stub.ClaimOperations(_claim_request(0), metadata=ops.neutral))
        for wait in again:
            wait.cancel()
        _until_counted(services, "worker", 0)


def test_every_long_lived_call_counts_against_its_key(db_url: str) -> None:
    bounds = OpenCalls(per_key=1, per_gateway_key=2)
    with running_services(db_url, ManualClock(), open_calls=bounds) as services:
        ops = OpsClient(services)
        operation = ops.create(ALICE, "caps-1")
        longrunning = lro_grpc.OperationsStub(services.channel)  # type: ignore[no-untyped-call]

        def wait_request(seconds: float) -> pb.WaitOperationRequest:
            request = pb.WaitOperationRequest(operation_id=operation.id)
            request.timeout.FromTimedelta(timedelta(seconds=seconds))
            return request

        def wait_on(md: Metadata, seconds: float = WAIT_SECONDS) -> pb.Operation:
            found: pb.Operation = ops.stub.WaitOperation(wait_request(seconds), metadata=md)
            return found

        def google_wait_on(md: Metadata) -> lro.Operation:
            request = lro.WaitOperationRequest(name=f"operations/{operation.id}")
            request.timeout.FromTimedelta(timedelta(seconds=WAIT_SECONDS))
            found: lro.Operation = longrunning.WaitOperation(request, metadata=md)
            return found

        # A worker's lease stream takes its key's one slot: every other long-lived call of
        # the key is refused, in either scope.
        stream = LeaseStream(ops)
        _until_counted(services, "worker", 1)
        one = pb.ClaimOperationRequest(task_types=[IDLE_TASK], lease_seconds=30)
        _refused(lambda: ops.stub.ClaimOperation(one, metadata=ops.neutral))
        _refused(lambda: ops.stub.ClaimOperations(_claim_request(0), metadata=ops.neutral))
        _refused(lambda: _stream_of(ops.stub.HoldLeases, ops.neutral))
        _refused(lambda: _stream_of(ops.stub.Heartbeat, ops.worker_for(ALICE)))
        _refused(lambda: wait_on(ops.worker_for(ALICE)))
        stream.close()  # ended by the worker: the slot is free again
        _until_counted(services, "worker", 0)

        # A stream the service ends with an error gives its slot back too.
        unnamed = pb.HeartbeatRequest(operation_id=operation.id)  # no lease token
        beats = ops.stub.Heartbeat(iter([unnamed]), metadata=ops.worker_for(ALICE))
        expect_failure(lambda: next(beats), grpc.StatusCode.INVALID_ARGUMENT, "invalid_argument")
        _until_counted(services, "worker", 0)

        # A producer's waits, ours and google.longrunning's.
        producer = ops.md(Role.PRODUCER, ALICE)
        waiting = ops.stub.WaitOperation.future(wait_request(WAIT_SECONDS), metadata=producer)
        _until_counted(services, "producer", 1)
        _refused(lambda: google_wait_on(producer))
        _refused(lambda: wait_on(producer))
        waiting.cancel()
        _until_counted(services, "producer", 0)

        # The gateway's key has a bound of its own: owner watches and waits.
        gateway = ops.gateway(ALICE)
        watches = [ops.stub.WatchOwner(pb.WatchOwnerRequest(), metadata=gateway) for _ in range(2)]
        _until_counted(services, "gateway", 2)
        _refused(lambda: next(ops.stub.WatchOwner(pb.WatchOwnerRequest(), metadata=gateway)))
        _refused(lambda: wait_on(gateway))
        _refused(lambda: google_wait_on(gateway))
        for watch in watches:
            watch.cancel()
        _until_counted(services, "gateway", 0)
        assert wait_on(gateway, 0).id == operation.id  # nothing held: the wait is served
