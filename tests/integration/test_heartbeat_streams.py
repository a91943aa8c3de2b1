"""Hundreds of open heartbeat streams must not starve ordinary unary calls.

The streams are held by a grpc.aio client on its own event loop (``asyncio.run``
in the test thread); the server runs on the harness's background loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import grpc
import pytest
from sqlalchemy import func, select

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.api.operations.v1 import operations_pb2_grpc as pb_grpc
from durable_ops.storage.schema import UserOperation
from tests.support.clock import ManualClock
from tests.support.grpc_services import Services, running_services
from tests.support.operations_client import OWNER_IDS, RUNNING, Lease, OpsClient
from tests.support.stored import rows

STREAMS = 200
UNARY_CALLS = 50
SANITY_SECONDS = 5.0  # a generous bound: this is not a benchmark
STEP_TIMEOUT = 60.0


@pytest.fixture
def services(db_url: str) -> Iterator[Services]:
    with running_services(db_url, ManualClock()) as running:
        yield running


def _claimed(ops: OpsClient, count: int) -> list[Lease]:
    for index in range(count):
        ops.create(OWNER_IDS[index % len(OWNER_IDS)], f"stream-{index}", subject_id=f"s-{index}")
    leases = [ops.claim_one(lease_seconds=60) for _ in range(count)]
    assert len({lease.id for lease in leases}) == count
    return leases


async def _beat(
    call: grpc.aio.StreamStreamCall[pb.HeartbeatRequest, pb.HeartbeatResponse],
    request: pb.HeartbeatRequest,
) -> pb.HeartbeatResponse:
    await call.write(request)
    answer = await call.read()
    assert isinstance(answer, pb.HeartbeatResponse), answer
    return answer


async def _timed_gets(
    stub: pb_grpc.OperationsServiceAsyncStub, ops: OpsClient, leases: list[Lease], count: int
) -> list[float]:
    async def one(index: int) -> float:
        lease = leases[(index * 7) % len(leases)]
        started = time.perf_counter()
        found = await stub.GetOperation(
            pb.GetOperationRequest(operation_id=lease.id),
            metadata=ops.gateway(lease.owner),
            timeout=STEP_TIMEOUT,
        )
        elapsed = time.perf_counter() - started
        assert (found.id, found.state) == (lease.id, RUNNING)
        return elapsed

    # a few at a time, as a page of users would poll
    latencies: list[float] = []
    for first in range(0, count, 10):
        latencies += await asyncio.gather(*(one(i) for i in range(first, min(first + 10, count))))
    return latencies


async def _exercise(target: str, ops: OpsClient, leases: list[Lease]) -> dict[str, float]:
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.OperationsServiceStub(channel)
        calls = [stub.Heartbeat(metadata=ops.worker_for(lease.owner)) for lease in leases]
        opened = time.perf_counter()
        first = await asyncio.wait_for(
            asyncio.gather(
                *(
                    _beat(
                        call,
                        pb.HeartbeatRequest(
                            operation_id=lease.id,
                            lease_token=lease.token,
                            lease_seconds=60,
                            progress_percent=10,
                        ),
                    )
                    for call, lease in zip(calls, leases, strict=True)
                )
            ),
            STEP_TIMEOUT,
        )
        open_seconds = time.perf_counter() - opened
        assert [answer.cancel_requested for answer in first] == [False] * len(leases)

        # every stream is open and idle: plain reads must still be quick
        idle = await asyncio.wait_for(_timed_gets(stub, ops, leases, UNARY_CALLS), STEP_TIMEOUT)

        # now with a wave of heartbeats (progress only, as later beats may be) in flight
        wave = asyncio.gather(
            *(_beat(call, pb.HeartbeatRequest(progress_percent=20)) for call in calls)
        )
        busy = await asyncio.wait_for(_timed_gets(stub, ops, leases, UNARY_CALLS), STEP_TIMEOUT)
        second = await asyncio.wait_for(wave, STEP_TIMEOUT)
        assert len(second) == len(leases)

        for call in calls:
            await call.done_writing()
        for call in calls:
            assert await asyncio.wait_for(call.read(), STEP_TIMEOUT) == grpc.aio.EOF
            assert await call.code() == grpc.StatusCode.OK
    for latencies in (idle, busy):
        assert len(latencies) == UNARY_CALLS
        assert max(latencies) < SANITY_SECONDS
    return {
        "open_seconds": open_seconds,
        "idle_max": max(idle),
        "idle_mean": sum(idle) / len(idle),
        "busy_max": max(busy),
        "busy_mean": sum(busy) / len(busy),
    }


def test_unary_calls_stay_responsive_with_two_hundred_open_streams(
    services: Services,
) -> None:
    ops = OpsClient(services)
    leases = _claimed(ops, STREAMS)
    figures = asyncio.run(_exercise(services.target, ops, leases))
    print(
        f"\n[{services.db.dialect}] {STREAMS} streams opened in {figures['open_seconds']:.2f}s; "
        f"{UNARY_CALLS} GetOperation with streams idle: max {figures['idle_max'] * 1000:.1f} ms "
        f"(mean {figures['idle_mean'] * 1000:.1f} ms); during a heartbeat wave: "
        f"max {figures['busy_max'] * 1000:.1f} ms (mean {figures['busy_mean'] * 1000:.1f} ms)"
    )
    found = rows(
        services.db,
        select(UserOperation.state, UserOperation.progress_percent, func.count()).group_by(
            UserOperation.state, UserOperation.progress_percent
        ),
    )
    assert [tuple(row) for row in found] == [("running", 20, STREAMS)]
    # the streams closed cleanly: the leases are still held and usable
    assert ops.complete(leases[0]) == pb.OPERATION_STATE_SUCCEEDED
