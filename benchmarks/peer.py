"""Figure 5: draining no-op work, ours (gRPC workers, MariaDB) vs procrastinate and pgqueuer.

Each round queues N ``bench.noop`` operations through our API and, for each
peer, N no-op jobs on a database of its own on the local PostgreSQL server,
created with the peer's schema before the round and dropped after it, so no
peer drains a table grown by earlier rounds; no enqueueing is timed.
procrastinate's own worker (``concurrency=WORKERS``, ``wait=False``: it stops
when the queue is empty), pgqueuer's (``benchmarks.pgqueuer_peer``) and our
no-op worker loops (``WORKERS`` of them, ``benchmarks.noop_worker``) drain
their queues, timed. The figure is our jobs/s ÷ procrastinate's, against the
target; ours ÷ pgqueuer's is printed beside it without one.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import secrets
import time
from typing import Any

from benchmarks import noop_worker, pgqueuer_peer
from benchmarks.context import Context
from benchmarks.databases import mariadb_database, postgres_database
from benchmarks.processes import operations_server
from benchmarks.stats import Paired, interleave_async
from benchmarks.table import Row, Target

WORKERS = 4
# Operations per claim and per completion call of our workers (ClaimOperations, ADR 0022).
BATCH = 10
# Issue 17: three times procrastinate with the same number of workers (2 before it).
TARGET = Target(">=", 3.0)
QUEUE = "bench"


def available() -> bool:
    """procrastinate and psycopg come with the ``bench`` extra (``scripts/bootstrap.sh``)."""
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


async def _procrastinate_round(count: int) -> float:
    """On a database of its own: a jobs table left by earlier rounds slowed procrastinate."""
    with postgres_database() as conninfo:
        app, noop = _procrastinate_app(conninfo, WORKERS)
        async with app.open_async():
            await app.schema_manager.apply_schema_async()
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
    done = await noop_worker.drain(target, WORKERS, batch=BATCH)
    elapsed = time.perf_counter() - started
    if done < count:
        raise RuntimeError(f"our workers drained {done} of {count} operations")
    return done / elapsed


def _ratios(paired: Paired) -> str:
    return "per-round ratios " + ", ".join(f"{r:.2f}" for r in paired.ratios)


def run(ctx: Context) -> list[Row]:
    count = ctx.pick(1000, 10_000)
    ctx.begin_section("5 against peers (procrastinate, pgqueuer)")
    if not available():
        return [
            Row(
                "5",
                "no-op jobs drained: ours ÷ procrastinate",
                "skipped",
                "",
                float("nan"),
                TARGET,
                "procrastinate is not installed: run scripts/bootstrap.sh",
            )
        ]
    logging.getLogger("procrastinate").setLevel(logging.WARNING)
    with_pgqueuer = pgqueuer_peer.available()
    pgqueuer_rates: list[float] = []

    async def peers() -> float:
        """Both peers are a round's baseline side, in reverse order every other round (ours,
        procrastinate, pgqueuer; pgqueuer, procrastinate, ours): a drift in the load lands
        on all three alike. Returns procrastinate's rate; pgqueuer's is kept aside."""
        if with_pgqueuer and len(pgqueuer_rates) % 2:
            pgqueuer_rates.append(await pgqueuer_peer.drain_round(count, WORKERS))
            return await _procrastinate_round(count)
        rate = await _procrastinate_round(count)
        if with_pgqueuer:
            pgqueuer_rates.append(await pgqueuer_peer.drain_round(count, WORKERS))
        return rate

    with mariadb_database() as url, operations_server(url) as target:
        paired = asyncio.run(interleave_async(ctx.rounds, lambda: _our_round(target, count), peers))
    rows = [
        Row(
            "5",
            f"{count:,} no-op jobs drained, jobs/s: ours (MariaDB) ÷ procrastinate (PostgreSQL)",
            f"{paired.subject_median:.0f}/s",
            f"{paired.baseline_median:.0f}/s",
            paired.ratio,
            TARGET,
            f"{WORKERS} workers each side, a fresh PostgreSQL database per peer round; "
            + _ratios(paired),
        )
    ]
    figure = f"{count:,} no-op jobs drained, jobs/s: ours (MariaDB) ÷ pgqueuer (PostgreSQL)"
    if not with_pgqueuer:
        note = "pgqueuer is not installed: run scripts/bootstrap.sh"
        return [*rows, Row("5", figure, "skipped", "", float("nan"), None, note)]
    beside = Paired(paired.subject, tuple(pgqueuer_rates))
    note = (
        f"pgqueuer: {WORKERS} jobs in flight (max_concurrent_tasks), dequeued in batches of"
        f" {WORKERS // 2}; no target, a second peer beside the first; " + _ratios(beside)
    )
    return [
        *rows,
        Row(
            "5",
            figure,
            f"{beside.subject_median:.0f}/s",
            f"{beside.baseline_median:.0f}/s",
            beside.ratio,
            None,
            note,
        ),
    ]
