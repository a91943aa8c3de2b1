"""Figure 5: draining no-op work, ours (gRPC workers, MariaDB) vs procrastinate (PostgreSQL).

Each round queues N no-op jobs in procrastinate (one ``batch_defer_async``) on
a fresh local PostgreSQL database with its schema applied, and N
``bench.noop`` operations through our API; neither enqueueing is timed. Then
procrastinate's own worker (``concurrency=WORKERS``, ``wait=False``: it stops
when the queue is empty) and our no-op worker loops (``WORKERS`` of them,
``benchmarks.noop_worker``) drain their queues, timed. The figure is our
jobs/s ÷ procrastinate's.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import secrets
import time
from typing import Any

from benchmarks import noop_worker
from benchmarks.context import Context
from benchmarks.databases import mariadb_database, postgres_database
from benchmarks.processes import operations_server
from benchmarks.stats import Paired, interleave_async
from benchmarks.table import Row, Target

WORKERS = 4
TARGET = Target(">=", 2.0)
QUEUE = "bench"


def available() -> bool:
    """procrastinate and psycopg come with the ``bench`` extra: ``pip install -e '.[bench]'``."""
    return importlib.util.find_spec("procrastinate") is not None


def _procrastinate_app(conninfo: str, workers: int) -> tuple[Any, Any]:
    import procrastinate  # type: ignore[import-not-found,unused-ignore]

    connector = procrastinate.PsycopgConnector(
        conninfo=conninfo, min_size=workers + 2, max_size=workers + 4
    )
    app = procrastinate.App(connector=connector)

    @app.task(name="bench.noop", queue=QUEUE)
    async def noop() -> None:
        return None

    return app, noop


async def _procrastinate_round(conninfo: str, count: int) -> float:
    app, noop = _procrastinate_app(conninfo, WORKERS)
    async with app.open_async():
        await noop.batch_defer_async(*([{}] * count))
        started = time.perf_counter()
        await app.run_worker_async(
            queues=[QUEUE], concurrency=WORKERS, wait=False, install_signal_handlers=False
        )
        elapsed = time.perf_counter() - started
    return count / elapsed


async def _our_round(target: str, count: int) -> float:
    await noop_worker.fill(target, count, f"peer-{secrets.token_hex(4)}")
    started = time.perf_counter()
    done = await noop_worker.drain(target, WORKERS)
    elapsed = time.perf_counter() - started
    if done < count:
        raise RuntimeError(f"our workers drained {done} of {count} operations")
    return done / elapsed


async def _schema(conninfo: str) -> None:
    app, _noop = _procrastinate_app(conninfo, 1)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()


def run(ctx: Context) -> list[Row]:
    count = ctx.pick(1000, 10_000)
    ctx.begin_section("5 against a peer (procrastinate)")
    if not available():
        return [
            Row(
                "5",
                "no-op jobs drained: ours ÷ procrastinate",
                "skipped",
                "",
                float("nan"),
                TARGET,
                "procrastinate is not installed: pip install -e '.[bench]'",
            )
        ]
    logging.getLogger("procrastinate").setLevel(logging.WARNING)
    with (
        postgres_database() as conninfo,
        mariadb_database() as url,
        operations_server(url) as target,
    ):
        asyncio.run(_schema(conninfo))

        async def rounds() -> Paired:
            return await interleave_async(
                ctx.rounds,
                lambda: _our_round(target, count),
                lambda: _procrastinate_round(conninfo, count),
            )

        paired = asyncio.run(rounds())
    return [
        Row(
            "5",
            f"{count:,} no-op jobs drained, jobs/s: ours (MariaDB) ÷ procrastinate (PostgreSQL)",
            f"{paired.subject_median:.0f}/s",
            f"{paired.baseline_median:.0f}/s",
            paired.ratio,
            TARGET,
            f"{WORKERS} workers each side; per-round ratios "
            + ", ".join(f"{r:.2f}" for r in paired.ratios),
        )
    ]
