"""Figure 1: end-to-end lifecycle throughput through the real gRPC services vs raw SQL.

Subject: ``opsctl serve operations`` (a real process) on a fresh database;
producers create ``bench.noop`` operations and workers claim, heartbeat once
and complete them over gRPC until every operation of the round is done.

Baseline: the same shape (same producer and worker counts, same driver) as
threads replaying, per phase, exactly the statements the server issued for
one captured lifecycle (``benchmarks.capture``), with no gRPC and no ORM.

The figure is lifecycles/s of the subject ÷ the baseline, median of rounds,
twice: with workers making single-operation calls (claim, heartbeat, complete
one at a time) against the replay of one lifecycle's statements; and with the
worker SDK's default options (batches of 10; work this short holds no
heartbeat) against a replay of the SDK's batched claim and completion (whole
batches while there are, single lifecycles for the rest). The Operations
processes' CPU per lifecycle is printed with each.
On MariaDB a full run measures it twice: with one Operations process, and with one
replica per core behind a target naming them all (docs/operations.md,
"Scaling"). SQLite serialises writers on one file lock, so it gets one.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import statistics
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from benchmarks import client, noop_worker, replay
from benchmarks.capture import Recording, capture_batch, capture_lifecycle
from benchmarks.context import Context
from benchmarks.databases import mariadb_database, sqlite_database
from benchmarks.processes import cpu_seconds, operations_server
from benchmarks.stats import Paired, interleave_async
from benchmarks.table import Row, Target
from durable_ops.worker import WorkerOptions

PRODUCERS = 2
WORKERS = 4
OWNERS = 50
# Issue 17: with the SDK's default batches, at least half the raw SQL's rate on MariaDB and
# 0.3 on SQLite (whose single writer lock the raw replay uses without any overhead).
SDK_TARGETS = {"MariaDB": Target(">=", 0.5), "SQLite": Target(">=", 0.3)}
SDK_BATCH = WorkerOptions().batch_size
# One Operations replica per core: how docs/operations.md "Scaling" runs a busy host.
REPLICAS_PER_CORE = os.cpu_count() or 1


async def subject_round(target: str, total: int, *, heartbeat: bool = True) -> float:
    ops = client.OpsClient(target)
    try:
        return await client.run_lifecycles(
            ops,
            total=total,
            producers=PRODUCERS,
            workers=WORKERS,
            owners=OWNERS,
            run_id=f"s-{secrets.token_hex(4)}",
            heartbeat=heartbeat,
        )
    finally:
        await ops.close()


async def sdk_round(target: str, total: int) -> float:
    """The subject with the worker SDK's default options (batches of 10, no heartbeat for
    work this short)."""
    ops = client.OpsClient(target)
    try:
        return await noop_worker.lifecycles(
            ops,
            target,
            total=total,
            producers=PRODUCERS,
            workers=WORKERS,
            owners=OWNERS,
            run_id=f"k-{secrets.token_hex(4)}",
        )
    finally:
        await ops.close()


async def baseline_round(
    url: str, recording: Recording, total: int, batch: Recording | None = None
) -> float:
    return await asyncio.to_thread(
        replay.run_lifecycles,
        url,
        recording,
        total=total,
        producers=PRODUCERS,
        workers=WORKERS,
        owners=OWNERS,
        run_id=f"b-{secrets.token_hex(4)}",
        heartbeat=batch is None,
        batch=batch,
    )


@dataclass
class Measured:
    single: Paired  # single-operation calls ÷ their raw replay
    batched: Paired  # the SDK ÷ the raw replay of its batches
    # Operations processes' CPU seconds per lifecycle, each subject round
    single_cpu: list[float] = field(default_factory=list)
    batched_cpu: list[float] = field(default_factory=list)


async def _with_cpu(
    target: str, total: int, run: Callable[[], Awaitable[float]], spent: list[float]
) -> float:
    before = cpu_seconds(target)
    rate = await run()
    spent.append((cpu_seconds(target) - before) / total)
    return rate


def measure(ctx: Context, url: str, total: int, replicas: int = 1) -> Measured:
    recording = capture_lifecycle(url)
    batch = capture_batch(url, SDK_BATCH)
    with operations_server(url, replicas=replicas) as target:

        async def rounds() -> Measured:
            await subject_round(target, max(total // 5, 20))  # warm-up: connections, caches
            cpu: tuple[list[float], list[float]] = ([], [])
            single = await interleave_async(
                ctx.rounds,
                lambda: _with_cpu(target, total, lambda: subject_round(target, total), cpu[0]),
                lambda: baseline_round(url, recording, total),
            )
            batched = await interleave_async(
                ctx.rounds,
                lambda: _with_cpu(target, total, lambda: sdk_round(target, total), cpu[1]),
                lambda: baseline_round(url, recording, total, batch),
            )
            return Measured(single, batched, *cpu)

        return asyncio.run(rounds())


def _cpu(spent: list[float]) -> str:
    return f"Operations CPU per lifecycle {statistics.median(spent) * 1000:.2f} ms"


def rows(engine: str, measured: Measured, replicas: int = 1) -> list[Row]:
    deployment = "1 Operations process" if replicas == 1 else f"{replicas} Operations replicas"
    single, batched = measured.single, measured.batched
    return [
        Row(
            "1",
            f"lifecycles/s {engine}, {deployment}, worker SDK (batches of {SDK_BATCH}):"
            " gRPC services ÷ raw SQL",
            f"{batched.subject_median:.0f}/s",
            f"{batched.baseline_median:.0f}/s",
            batched.ratio,
            SDK_TARGETS[engine],
            f"{engine}: {PRODUCERS} producers, {WORKERS} SDK workers; the baseline replays"
            f" the SDK's batched claim and completion; {_cpu(measured.batched_cpu)};"
            " per-round ratios " + ", ".join(f"{r:.2f}" for r in batched.ratios),
        ),
        Row(
            "1",
            f"lifecycles/s {engine}, {deployment}, single-operation calls: gRPC ÷ raw SQL",
            f"{single.subject_median:.0f}/s",
            f"{single.baseline_median:.0f}/s",
            single.ratio,
            None,
            f"{engine}: {PRODUCERS} producers, {WORKERS} workers (claim, heartbeat, complete"
            f" one at a time); {_cpu(measured.single_cpu)}; per-round ratios "
            + ", ".join(f"{r:.2f}" for r in single.ratios),
        ),
    ]


def run(ctx: Context) -> list[Row]:
    total = ctx.pick(300, 2000)
    found: list[Row] = []
    # Quick mode skips the replica row, to stay under three minutes.
    for replicas in [1] if ctx.quick else sorted({1, REPLICAS_PER_CORE}):
        ctx.begin_section(f"1 end-to-end throughput (MariaDB, {replicas} Operations processes)")
        with mariadb_database() as url:
            found += rows("MariaDB", measure(ctx, url, total, replicas), replicas)
    ctx.begin_section("1 end-to-end throughput (SQLite)")
    with sqlite_database() as url:
        found += rows("SQLite", measure(ctx, url, total))
    return found
