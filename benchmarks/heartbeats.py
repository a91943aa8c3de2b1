"""Figure 6: what 200 live, heartbeating leases cost the end-to-end throughput.

Subject rounds first claim ``LEASES`` operations of another task type and hold
each on its own open Heartbeat stream, beating every ``lease / 3`` seconds as
the AI worker does (``BEATS_PER_LEASE``), staggered; then they measure the
lifecycle throughput of figure 1 while those streams beat, and finally
complete the held operations. Baseline rounds measure the same throughput
with no lease held. Both on MariaDB through ``opsctl serve operations``.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import secrets

from benchmarks.client import Claimed, OpsClient
from benchmarks.context import Context
from benchmarks.databases import mariadb_database
from benchmarks.processes import operations_server
from benchmarks.stats import Paired, interleave_async
from benchmarks.table import Row, Target
from benchmarks.throughput import subject_round

LEASES = 200
LEASE_SECONDS = 15
BEATS_PER_LEASE = 3
HELD_TASK = "bench.held"
TARGET = Target(">=", 0.75)


class Holders:
    """``LEASES`` claimed operations, each heartbeated on its own stream."""

    def __init__(self, target: str) -> None:
        self._clients = [OpsClient(target) for _ in range(4)]
        self._tasks: list[asyncio.Task[None]] = []
        self._claimed: list[Claimed] = []
        self.beats = 0

    async def start(self) -> None:
        run_id = secrets.token_hex(4)
        first = self._clients[0]
        await asyncio.gather(
            *(
                self._clients[i % 4].create(f"bench-holder-{i % 20}", f"{run_id}-{i}", HELD_TASK)
                for i in range(LEASES)
            )
        )
        while len(self._claimed) < LEASES:
            claimed = await first.claim(HELD_TASK, LEASE_SECONDS)
            if claimed is None:
                raise RuntimeError("a held operation could not be claimed")
            self._claimed.append(claimed)
        started = [asyncio.Event() for _ in self._claimed]
        self._tasks = [
            asyncio.create_task(self._hold(self._clients[i % 4], claimed, started[i]))
            for i, claimed in enumerate(self._claimed)
        ]
        await asyncio.gather(*(event.wait() for event in started))

    async def _hold(self, client: OpsClient, claimed: Claimed, started: asyncio.Event) -> None:
        interval = LEASE_SECONDS / BEATS_PER_LEASE
        call = client.heartbeat_stream(claimed)
        try:
            await call.write(client.beat(claimed, LEASE_SECONDS))
            await call.read()
            started.set()
            await asyncio.sleep(random.uniform(0, interval))
            while True:
                await call.write(client.beat(claimed, LEASE_SECONDS))
                await call.read()
                self.beats += 1
                await asyncio.sleep(interval)
        finally:
            call.cancel()

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await asyncio.gather(
            *(self._clients[i % 4].complete(c) for i, c in enumerate(self._claimed))
        )
        for each in self._clients:
            await each.close()


def run(ctx: Context) -> list[Row]:
    total = ctx.pick(300, 2000)
    ctx.begin_section("6 heartbeat cost")
    beats: list[float] = []
    with mariadb_database() as url, operations_server(url) as target:

        async def with_leases() -> float:
            holders = Holders(target)
            await holders.start()
            try:
                loop = asyncio.get_running_loop()
                started, before = loop.time(), holders.beats
                rate = await subject_round(target, total)
                beats.append((holders.beats - before) / (loop.time() - started))
                return rate
            finally:
                await holders.stop()

        async def rounds() -> Paired:
            await subject_round(target, max(total // 5, 20))  # warm-up
            return await interleave_async(
                ctx.rounds, with_leases, lambda: subject_round(target, total)
            )

        paired = asyncio.run(rounds())
    return [
        Row(
            "6",
            f"lifecycles/s with {LEASES} live leases heartbeating ÷ with none",
            f"{paired.subject_median:.0f}/s",
            f"{paired.baseline_median:.0f}/s",
            paired.ratio,
            TARGET,
            f"{LEASES} open Heartbeat streams, one beat each {LEASE_SECONDS / BEATS_PER_LEASE:g} s"
            f" (lease {LEASE_SECONDS} s, the AI worker's cadence of lease/3), measured"
            f" {sum(beats) / max(len(beats), 1):.0f} beats/s; per-round ratios "
            + ", ".join(f"{r:.2f}" for r in paired.ratios),
        )
    ]
