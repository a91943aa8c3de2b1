"""The benchmark's gRPC client of the Operations service: producer and no-op worker calls.

A producer creates ``bench.noop`` operations in an owner scope; a worker claims
in the neutral scope and heartbeats and completes in the claimed owner's scope,
exactly as the AI worker does, with no work in between.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

import grpc

from benchmarks.processes import caller
from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.api.operations.v1 import operations_pb2_grpc as pb_grpc
from durable_ops.model.scope import Role
from durable_ops.rpc.client import open_channel

TASK_TYPE = "bench.noop"
LEASE_SECONDS = 30
IDLE_SLEEP_SECONDS = 0.002


@dataclass(frozen=True)
class Claimed:
    operation_id: str
    owner_id: str
    lease_token: str


class OpsClient:
    """One channel to the Operations service, with a producer and a worker credential."""

    def __init__(self, target: str) -> None:
        self.channel = open_channel(target, None)
        self.stub = pb_grpc.OperationsServiceStub(self.channel)
        self._producer = caller(Role.PRODUCER)
        self._worker = caller(Role.WORKER)
        self._gateway = caller(Role.GATEWAY)

    async def close(self) -> None:
        await self.channel.close()

    async def create(
        self, owner: str, key: str, task_type: str = TASK_TYPE, subject_id: str = "s"
    ) -> pb.Operation:
        reply = await self.stub.CreateOperation(
            pb.CreateOperationRequest(
                task_type=task_type,
                idempotency_key=key,
                subject=pb.Subject(type="bench", id=subject_id),
            ),
            metadata=self._producer.metadata(owner),
        )
        operation: pb.Operation = reply.operation
        return operation

    async def get(self, owner: str, operation_id: str) -> pb.Operation:
        reply: pb.Operation = await self.stub.GetOperation(
            pb.GetOperationRequest(operation_id=operation_id),
            metadata=self._gateway.metadata(owner),
        )
        return reply

    async def list(self, owner: str, page_size: int, token: str = "") -> pb.ListOperationsResponse:
        reply: pb.ListOperationsResponse = await self.stub.ListOperations(
            pb.ListOperationsRequest(page_size=page_size, page_token=token),
            metadata=self._gateway.metadata(owner),
        )
        return reply

    async def claim(
        self, task_type: str = TASK_TYPE, lease_seconds: int = LEASE_SECONDS
    ) -> Claimed | None:
        reply = await self.stub.ClaimOperation(
            pb.ClaimOperationRequest(task_types=[task_type], lease_seconds=lease_seconds),
            metadata=self._worker.metadata(),
        )
        if not reply.HasField("claimed"):
            return None
        claimed = reply.claimed
        return Claimed(claimed.operation.id, claimed.owner_id, claimed.lease_token)

    async def claim_waiting(
        self, task_type: str, wait_seconds: float, lease_seconds: int = LEASE_SECONDS
    ) -> Claimed | None:
        """A claim that waits up to ``wait_seconds`` for work, as the AI worker's does."""
        request = pb.ClaimOperationRequest(task_types=[task_type], lease_seconds=lease_seconds)
        request.wait.FromTimedelta(timedelta(seconds=wait_seconds))
        reply = await self.stub.ClaimOperation(request, metadata=self._worker.metadata())
        if not reply.HasField("claimed"):
            return None
        claimed = reply.claimed
        return Claimed(claimed.operation.id, claimed.owner_id, claimed.lease_token)

    async def claim_many(
        self, limit: int, task_type: str = TASK_TYPE, lease_seconds: int = LEASE_SECONDS
    ) -> Sequence[Claimed]:
        """Up to ``limit`` operations in one ``ClaimOperations`` (one transaction)."""
        reply = await self.stub.ClaimOperations(
            pb.ClaimOperationsRequest(
                task_types=[task_type], lease_seconds=lease_seconds, max_operations=limit
            ),
            metadata=self._worker.metadata(),
        )
        return [Claimed(one.operation.id, one.owner_id, one.lease_token) for one in reply.claimed]

    async def complete_many(self, claims: Sequence[Claimed]) -> int:
        """Complete ``claims`` in one ``SettleOperations``; how many were refused."""
        reply = await self.stub.SettleOperations(
            pb.SettleOperationsRequest(
                items=[
                    pb.SettleOperationsRequest.Item(
                        owner_id=claimed.owner_id,
                        complete=pb.CompleteOperationRequest(
                            operation_id=claimed.operation_id, lease_token=claimed.lease_token
                        ),
                    )
                    for claimed in claims
                ]
            ),
            metadata=self._worker.metadata(),
        )
        return sum(1 for outcome in reply.outcomes if outcome.status_code)

    def heartbeat_stream(
        self, claimed: Claimed
    ) -> grpc.aio.StreamStreamCall[pb.HeartbeatRequest, pb.HeartbeatResponse]:
        return self.stub.Heartbeat(metadata=self._worker.metadata(claimed.owner_id))

    @staticmethod
    def beat(claimed: Claimed, lease_seconds: int = LEASE_SECONDS) -> pb.HeartbeatRequest:
        return pb.HeartbeatRequest(
            operation_id=claimed.operation_id,
            lease_token=claimed.lease_token,
            lease_seconds=lease_seconds,
        )

    async def heartbeat_once(self, claimed: Claimed) -> None:
        call = self.heartbeat_stream(claimed)
        await call.write(self.beat(claimed))
        await call.read()
        await call.done_writing()
        await call.read()  # end of stream

    async def complete(self, claimed: Claimed) -> None:
        await self.stub.CompleteOperation(
            pb.CompleteOperationRequest(
                operation_id=claimed.operation_id, lease_token=claimed.lease_token
            ),
            metadata=self._worker.metadata(claimed.owner_id),
        )


class Producer:
    """Creates ``total`` numbered ``bench.noop`` operations over ``owners`` owners;
    several tasks running ``run`` share the numbering, so each index is made once."""

    def __init__(self, client: OpsClient, *, total: int, owners: int, run_id: str) -> None:
        self._client = client
        self._total = total
        self._owners = owners
        self._run_id = run_id
        self._next = 0

    async def run(self) -> None:
        while self._next < self._total:
            index = self._next
            self._next += 1
            await self._client.create(
                f"bench-owner-{index % self._owners}", f"{self._run_id}-{index}"
            )


async def run_lifecycles(
    client: OpsClient,
    *,
    total: int,
    producers: int,
    workers: int,
    owners: int,
    run_id: str,
    heartbeat: bool = True,
) -> float:
    """Create ``total`` operations and drain them; lifecycles per second (create to complete).

    Every task shares ``client``'s channel: grpc shares one connection among all
    channels of a process to the same target anyway (its global subchannel pool).
    """
    completed = 0
    done = asyncio.Event()

    async def work() -> None:
        nonlocal completed
        while not done.is_set():
            claimed = await client.claim()
            if claimed is None:
                await asyncio.sleep(IDLE_SLEEP_SECONDS)
                continue
            if heartbeat:
                await client.heartbeat_once(claimed)
            await client.complete(claimed)
            completed += 1
            if completed >= total:
                done.set()

    producer = Producer(client, total=total, owners=owners, run_id=run_id)
    loop = asyncio.get_running_loop()
    started = loop.time()
    tasks = [producer.run() for _ in range(producers)] + [work() for _ in range(workers)]
    await asyncio.gather(*tasks)
    return total / (loop.time() - started)
