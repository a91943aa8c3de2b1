"""The worker's one lease stream (``durable_ops.worker.lease``, ADR 0026) on the real server.

Every long attempt of a worker holds its lease on the same ``HoldLeases`` stream:
one UPDATE extends all of them per beat, progress reaches each owner, the
owner's cancel stops that attempt alone, a broken stream is reopened with the same
leases and an ended lease is dropped. Both engines; timeouts are hang guards.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

import grpc

from durable_ops.api.operations.v1 import operations_pb2_grpc as pb_grpc
from durable_ops.model.scope import Role
from durable_ops.worker import Attempt, Worker, WorkerOptions
from durable_ops.worker.lease import HoldLeasesCall, LeaseStream
from tests.support.clock import ManualClock
from tests.support.grpc_services import Services, metadata
from tests.support.keys import signing_key
from tests.support.operations_client import (
    CANCELLED,
    OWNER_IDS,
    RUNNING,
    TASK,
    OpsClient,
)
from tests.support.running_worker import run_until

HANG_GUARD = 30.0
LEASE_SECONDS = 6  # a beat every two seconds
T = TypeVar("T")
CASES_PER_BEAT = 4  # a beat's UPDATE picks owner, token hash, expiry and progress per row


class BeatUpdates:
    """How many leases each beat's UPDATE carried (the engine's statements, every thread)."""

    def __init__(self, services: Services) -> None:
        self._db = services.db
        self._lock = threading.Lock()
        self.sizes: list[int] = []

    def _record(self, _conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if (
            statement.startswith("UPDATE user_operations")
            and "lease_token_hash = CASE" in statement
        ):
            with self._lock:
                self.sizes.append(statement.count("WHEN") // CASES_PER_BEAT)

    def __enter__(self) -> BeatUpdates:
        self._db.listen("before_cursor_execute", self._record)
        return self

    def __exit__(self, *exc: object) -> None:
        self._db.unlisten("before_cursor_execute", self._record)


async def _until(check: Callable[[], bool]) -> None:
    while not await asyncio.to_thread(check):
        await asyncio.sleep(0.02)


def test_the_long_jobs_of_many_owners_share_one_stream_and_one_update_per_beat(
    services: Services, ops: OpsClient
) -> None:
    ids = {
        ops.create(OWNER_IDS[n % 4], f"k-long-{n}", subject_id=f"s-{n}").id: OWNER_IDS[n % 4]
        for n in range(6)
    }
    victim = next(iter(ids))
    release = asyncio.Event()
    cancelled: list[str] = []
    worker = Worker(
        services.target,
        signing_key(Role.WORKER),
        WorkerOptions(
            concurrency=6,
            batch_size=6,
            lease_seconds=LEASE_SECONDS,
        ),
    )

    @worker.handler(TASK)
    async def long_work(attempt: Attempt) -> None:
        await attempt.progress(10 + int(attempt.subject.id[2:]))
        try:
            await release.wait()
        except asyncio.CancelledError:
            cancelled.append(attempt.operation_id)
            raise

    def progress_seen() -> bool:
        return all(
            ops.get(owner, operation_id).progress_percent
            == 10 + int(ops.row(operation_id).subject_id[2:])
            for operation_id, owner in ids.items()
        )

    async def scenario() -> None:
        await _until(progress_seen)
        with BeatUpdates(services) as beats:
            await _until(lambda: len(beats.sizes) >= 2)  # two beats a third of a lease apart
        assert worker.leases.held == 6
        assert beats.sizes[-2:] == [6, 6]  # every lease of the worker in each beat's UPDATE
        await asyncio.to_thread(ops.cancel, ids[victim], victim)
        await _until(lambda: ops.get(ids[victim], victim).state == CANCELLED)
        assert cancelled == [victim]
        assert {ops.get(owner, i).state for i, owner in ids.items() if i != victim} == {RUNNING}
        release.set()
        await _until(lambda: ops.state_counts() == {"cancelled": 1, "succeeded": 5})

    run_until(worker, scenario)
    assert worker.leases.held == 0


@dataclass
class _Holder:
    leases: LeaseStream


@dataclass(frozen=True)
class _Claimed:
    operation_id: str
    owner_id: str
    lease_token: str

    def log_fields(self) -> dict[str, object]:
        return {"operation_id": self.operation_id, "owner": self.owner_id}


def test_a_broken_stream_is_reopened_with_its_leases_and_an_ended_lease_is_dropped(
    services: Services, ops: OpsClient, clock: ManualClock
) -> None:
    for n in range(3):
        ops.create(OWNER_IDS[n], f"k-reopen-{n}", subject_id=f"s-{n}")
    claimed = [ops.claim_one(lease_seconds=LEASE_SECONDS) for _ in range(3)]
    held = [_Claimed(lease.id, lease.owner, lease.token) for lease in claimed]

    def extended(operation_id: str) -> bool:
        """Extended by a beat since the clock last moved."""
        return ops.row(operation_id).lease_expires_at == clock() + timedelta(seconds=LEASE_SECONDS)

    async def scenario() -> None:
        calls: list[HoldLeasesCall] = []
        async with grpc.aio.insecure_channel(services.target) as channel:
            stub = pb_grpc.OperationsServiceStub(channel)

            def open_call() -> HoldLeasesCall:
                call = stub.HoldLeases(metadata=metadata(Role.WORKER))
                calls.append(call)
                return call

            holder = _Holder(LeaseStream(open_call))
            leases = [await holder.leases.join(one, LEASE_SECONDS).ready() for one in held]
            assert len(calls) == 1
            calls[0].cancel()  # the connection to the replica went away
            clock.advance(1)
            await _until(lambda: all(extended(one.operation_id) for one in held))
            assert len(calls) == 2
            assert not any(lease.ended.is_set() for lease in leases)

            await leases[0].close()
            dropped_until = ops.row(held[0].operation_id).lease_expires_at
            clock.advance(1)
            await _until(lambda: extended(held[1].operation_id))
            await _until(lambda: extended(held[2].operation_id))
            assert ops.row(held[0].operation_id).lease_expires_at == dropped_until
            for lease in leases[1:]:
                await lease.close()
            assert holder.leases.held == 0
            await holder.leases.close()

    asyncio.run(asyncio.wait_for(scenario(), HANG_GUARD))
    assert all(ops.get(one.owner_id, one.operation_id).state == RUNNING for one in held)
