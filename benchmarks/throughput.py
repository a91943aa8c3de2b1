"""Figure 1: end-to-end lifecycle throughput through the real gRPC services vs raw SQL.

Subject: ``opsctl serve operations`` (a real process) on a fresh database;
producers create ``bench.noop`` operations and workers claim, heartbeat once
and complete them over gRPC until every operation of the round is done.

Baseline: the same shape (same producer and worker counts, same driver) as
threads replaying, per phase, exactly the statements the server issued for
one captured lifecycle (``benchmarks.capture``), with no gRPC and no ORM.

The figure is lifecycles/s of the subject ÷ the baseline, median of rounds.
On MariaDB a full run measures it twice: with one Operations process, and with one
replica per core behind a target naming them all (docs/operations.md,
"Scaling"). SQLite serialises writers on one file lock, so it gets one.
"""

from __future__ import annotations

import asyncio
import os
import secrets

from benchmarks import client, replay
from benchmarks.capture import Recording, capture_lifecycle
from benchmarks.context import Context
from benchmarks.databases import mariadb_database, sqlite_database
from benchmarks.processes import operations_server
from benchmarks.stats import Paired, interleave_async
from benchmarks.table import Row, Target

PRODUCERS = 2
WORKERS = 4
OWNERS = 50
TARGET = Target(">=", 0.5)
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


async def baseline_round(url: str, recording: Recording, total: int) -> float:
    return await asyncio.to_thread(
        replay.run_lifecycles,
        url,
        recording,
        total=total,
        producers=PRODUCERS,
        workers=WORKERS,
        owners=OWNERS,
        run_id=f"b-{secrets.token_hex(4)}",
    )


def measure(ctx: Context, url: str, total: int, replicas: int = 1) -> Paired:
    recording = capture_lifecycle(url)
    with operations_server(url, replicas=replicas) as target:

        async def rounds() -> Paired:
            await subject_round(target, max(total // 5, 20))  # warm-up: connections, caches
            return await interleave_async(
                ctx.rounds,
                lambda: subject_round(target, total),
                lambda: baseline_round(url, recording, total),
            )

        return asyncio.run(rounds())


def row(engine: str, paired: Paired, replicas: int = 1) -> Row:
    deployment = "1 Operations process" if replicas == 1 else f"{replicas} Operations replicas"
    return Row(
        "1",
        f"lifecycles/s {engine}, {deployment}: gRPC services ÷ raw SQL",
        f"{paired.subject_median:.0f}/s",
        f"{paired.baseline_median:.0f}/s",
        paired.ratio,
        TARGET,
        f"{engine}: {PRODUCERS} producers, {WORKERS} workers; per-round ratios "
        + ", ".join(f"{r:.2f}" for r in paired.ratios),
    )


def run(ctx: Context) -> list[Row]:
    total = ctx.pick(300, 2000)
    rows = []
    # Quick mode skips the replica row, to stay under three minutes.
    for replicas in [1] if ctx.quick else sorted({1, REPLICAS_PER_CORE}):
        ctx.begin_section(f"1 end-to-end throughput (MariaDB, {replicas} Operations processes)")
        with mariadb_database() as url:
            rows.append(row("MariaDB", measure(ctx, url, total, replicas), replicas))
    ctx.begin_section("1 end-to-end throughput (SQLite)")
    with sqlite_database() as url:
        rows.append(row("SQLite", measure(ctx, url, total)))
    return rows
