"""Figure 9: google.longrunning WaitOperation, latency to done and what waiting costs.

Two Operations replicas in this process, as ``durable_ops.operations.main``
builds them (servicer, cancel watch, claim poll, done watch, LRO servicer),
on one fresh MariaDB database. ``WAITERS`` ``WaitOperation`` calls sit on
replica 1, one per operation. The operations are then completed one at a
time, each after a random pause, in turn through replica 1 (its commit wakes
the waiter at once) and through replica 2 (the waiter is found by replica
1's shared done query). The latency runs from the end of ``CompleteOperation``
until that operation's ``WaitOperation`` answers ``done``.

The cost: replica 1's database statements over a quiet window with
``FEW_WAITERS`` and with ``WAITERS`` calls waiting; the done watch asks one
query per interval for all of them, so the rate must not grow with them.
"""

from __future__ import annotations

import asyncio
import random
import secrets
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from google.longrunning import operations_pb2_grpc as lro_grpc
from google.longrunning import operations_proto_pb2 as lro

from benchmarks.client import Claimed, OpsClient
from benchmarks.context import Context
from benchmarks.databases import mariadb_database
from benchmarks.lease_channel import Window, _StatementCounter
from benchmarks.processes import caller, trusted
from benchmarks.stats import median, percentile
from benchmarks.table import Row, Target
from durable_ops.clock import utc_now
from durable_ops.model.scope import Role
from durable_ops.operations.app import OperationsApp
from durable_ops.operations.main import SERVICE_NAMES, registration
from durable_ops.operations.tuning import TUNING
from durable_ops.rpc.client import open_channel
from durable_ops.rpc.server import build_server, start, stop
from durable_ops.storage.db import Database

INTERVAL = TUNING.watch_interval_seconds
WAITERS = 100
FEW_WAITERS = 10
WAIT_TASK = "bench.wait"
OWNER = "bench-waiter"
WAIT_SECONDS = 30.0
WINDOW_SECONDS = 5.0
DONE_P95 = Target("<=", 250.0)  # milliseconds
RATE_GROWTH = Target("<=", 1.0)  # statements/s added by 10x the waiters


@dataclass
class Replica:
    app: OperationsApp
    db: Database
    server: Any
    target: str

    async def close(self) -> None:
        await stop(self.server, 0.5)
        await self.app.close()
        self.db.dispose()


async def _replica(url: str) -> Replica:
    db = Database(url, pool_size=16)
    app = OperationsApp(db, utc_now)
    server, port = build_server("127.0.0.1:0", registration(app), SERVICE_NAMES, trusted=trusted())
    await start(server)
    return Replica(app, db, server, f"127.0.0.1:{port}")


class Waiters:
    """``WaitOperation`` calls on one replica, each noting when it answered done."""

    def __init__(self, target: str) -> None:
        self._channel = open_channel(target, None)
        self._stub = lro_grpc.OperationsStub(self._channel)
        self._metadata = caller(Role.GATEWAY).metadata(OWNER)
        self.answered: dict[str, float] = {}
        self._tasks: list[asyncio.Task[None]] = []

    def wait_on(self, operation_id: str) -> None:
        self._tasks.append(asyncio.create_task(self._wait(operation_id)))

    async def _wait(self, operation_id: str) -> None:
        request = lro.WaitOperationRequest(name=f"operations/{operation_id}")
        request.timeout.FromTimedelta(timedelta(seconds=WAIT_SECONDS))
        while True:
            answer = await self._stub.WaitOperation(
                request, metadata=self._metadata, timeout=WAIT_SECONDS + 10
            )
            if answer.done:
                self.answered[operation_id] = time.perf_counter()
                return

    async def answer_of(self, operation_id: str, seconds: float = 10.0) -> float:
        """When the wait on ``operation_id`` answered done (it must, within ``seconds``)."""
        deadline = time.perf_counter() + seconds
        while operation_id not in self.answered:
            if time.perf_counter() > deadline:
                raise TimeoutError("a WaitOperation did not answer")
            await asyncio.sleep(0.002)
        return self.answered[operation_id]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._channel.close()


async def _operations(client: OpsClient, count: int, run_id: str) -> list[Claimed]:
    for index in range(count):
        await client.create(OWNER, f"{run_id}-{index}", WAIT_TASK, subject_id=f"w{index}")
    claimed = []
    for _ in range(count):
        lease = await client.claim(WAIT_TASK, 600)
        if lease is None:
            raise RuntimeError("a waited-on operation could not be claimed")
        claimed.append(lease)
    return claimed


@dataclass(frozen=True)
class WaitRun:
    latencies: dict[str, list[float]]  # "this replica" / "another replica" -> seconds
    few: Window
    many: Window
    polls: int


async def measure(ctx: Context, url: str) -> WaitRun:
    first, second = await _replica(url), await _replica(url)
    clients = {"this replica": OpsClient(first.target), "another replica": OpsClient(second.target)}
    counter = _StatementCounter(first.db)
    waiters = Waiters(first.target)
    latencies: dict[str, list[float]] = {where: [] for where in clients}
    try:
        run_id = secrets.token_hex(4)
        held = await _operations(clients["this replica"], WAITERS, run_id)
        for lease in held[:FEW_WAITERS]:
            waiters.wait_on(lease.operation_id)
        await asyncio.sleep(1.0)
        ctx.say(f"  counting statements for {WINDOW_SECONDS:g} s with {FEW_WAITERS} waiters")
        few = await counter.window(WINDOW_SECONDS)
        for lease in held[FEW_WAITERS:]:
            waiters.wait_on(lease.operation_id)
        await asyncio.sleep(1.0)
        ctx.say(f"  counting statements for {WINDOW_SECONDS:g} s with {WAITERS} waiters")
        polls = first.app.watch.polls
        many = await counter.window(WINDOW_SECONDS)
        polls = first.app.watch.polls - polls
        ctx.say(f"  completing {WAITERS} waited-on operations, one at a time")
        wheres = list(clients)
        for index, lease in enumerate(held):
            where = wheres[index % 2]
            await asyncio.sleep(random.uniform(0, INTERVAL))
            await clients[where].complete(lease)
            finished = time.perf_counter()
            latencies[where].append(await waiters.answer_of(lease.operation_id) - finished)
    finally:
        await waiters.close()
        for client in clients.values():
            await client.close()
        await second.close()
        await first.close()
    return WaitRun(latencies, few, many, polls)


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def rows(found: WaitRun) -> list[Row]:
    result = []
    everything = [value for values in found.latencies.values() for value in values]
    for where, values in found.latencies.items():
        result.append(
            Row(
                "9",
                f"WaitOperation: complete → done answered, through {where}",
                f"p50 {_ms(median(values))}, p95 {_ms(percentile(values, 95))}",
                f"{len(values)} of {WAITERS} concurrent waiters",
                percentile(values, 95) * 1000,
                DONE_P95,
                "woken at once by the commit"
                if where == "this replica"
                else f"found by the shared done query (every {INTERVAL:g} s)",
                unit="ms",
            )
        )
    result.append(
        Row(
            "9",
            f"WaitOperation: DB statements/s of the waiters' replica, {WAITERS} vs {FEW_WAITERS}",
            f"{found.many.rate:.1f}/s",
            f"{found.few.rate:.1f}/s",
            found.many.rate - found.few.rate,
            RATE_GROWTH,
            f"{WINDOW_SECONDS:g}-s windows; {found.polls} done polls in the loaded one;"
            f" all waits p95 {_ms(percentile(everything, 95))}",
            unit="/s",
        )
    )
    return result


def run(ctx: Context) -> list[Row]:
    ctx.begin_section("9 google.longrunning WaitOperation (2 Operations replicas, MariaDB)")
    with mariadb_database() as url:
        return rows(asyncio.run(measure(ctx, url)))
