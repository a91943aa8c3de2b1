"""Section 14, fair shares (ADR 0049); also ``python -m benchmarks.fairness [--backlog N]
[--sqlite-only]`` alone.

Owner A has ``--backlog`` (10,000) queued no-op operations; owners B-E each create one
every 100 ms; four claimers take batches of 10 until A's backlog is gone. Both go
through one replica's application layer in this process (``OperationsApp``: the
service without gRPC), so its claim turn (one claim transaction at a time, ADR 0024)
and its waking of a waiting claim on a create are measured as the product runs them.
Printed per engine: B-E's pickup (create to claim) p50/p95, with fairness on, off, and
with no backlog (idle), and the claims per second of each run. Targets (issue 37): B-E
p95 with fairness at most 2x idle; throughput at least 0.9x fairness off. Figures, not
asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from functools import partial

from benchmarks.context import Context
from benchmarks.databases import mariadb_database, sqlite_database
from benchmarks.table import Row, Target
from durable_ops.clock import utc_now
from durable_ops.model.routing import Route
from durable_ops.operations.app import OperationsApp
from durable_ops.operations.tuning import TUNING
from durable_ops.storage import operations
from durable_ops.storage.db import Database
from durable_ops.storage.tx import Tx

TASK = "bench.noop"
OTHERS = ("owner-b", "owner-c", "owner-d", "owner-e")
CLAIMERS = 4
BATCH = 10
EVERY_SECONDS = 0.1


@dataclass
class Run:
    pickups: list[float]
    claims_per_second: float

    def percentile(self, q: float) -> float:
        return _percentile(self.pickups, q)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _request(key: str) -> operations.CreateRequest:
    return operations.CreateRequest(
        task_type=TASK, idempotency_key=key, subject_type="bench", subject_id=key
    )


def _backlog(db: Database, count: int, fair: bool) -> None:
    def create(tx: Tx, key: str) -> None:
        operations.create(tx, _request(key), utc_now(), fair=fair)

    for n in range(count):
        db.run(partial(create, key=f"a-{n}"), owner_id="owner-a")


def one_run(url: str, *, backlog: int, fair: bool, seconds_idle: float = 3.0) -> Run:
    """One replica's application layer in this process, as ``opsctl serve operations``
    builds it without gRPC: B-E create through it (waking a waiting claim, as a create
    does) and the claimers call its claim (its turn: one claim transaction at a time)."""
    db = Database(url, pool_size=CLAIMERS + 2)
    try:
        _backlog(db, backlog, fair)
        return asyncio.run(_drain(db, backlog, fair, seconds_idle))
    finally:
        db.dispose()


async def _drain(db: Database, backlog: int, fair: bool, seconds_idle: float) -> Run:
    app = OperationsApp(db, utc_now, tuning=replace(TUNING, fair_shares=fair))
    created_at: dict[str, float] = {}
    picked: dict[str, float] = {}
    claimed = 0
    stop = asyncio.Event()

    async def claimer() -> None:
        nonlocal claimed
        while not stop.is_set():
            taken = await app.claim([TASK], 600, [Route.LOCAL], 0.5, BATCH)
            at = time.monotonic()
            claimed += len(taken)
            for claim, _ in taken:
                if claim.operation.owner_user_id != "owner-a":
                    picked[claim.operation.id] = at
            # The service sends each answer over gRPC: other calls run between two claims
            # (on SQLite a claim can run inline on the loop and would otherwise never yield).
            await asyncio.sleep(0)

    async def others() -> None:
        n = 0
        while not stop.is_set():
            for owner in OTHERS:
                operation, _ = await app.create(owner, _request(f"{owner}-{n}"))
                created_at[operation.id] = time.monotonic()
            n += 1
            await asyncio.sleep(EVERY_SECONDS)

    tasks = [asyncio.create_task(claimer()) for _ in range(CLAIMERS)]
    tasks.append(asyncio.create_task(others()))
    started = time.monotonic()
    while not (backlog and claimed - len(picked) >= backlog):
        await asyncio.sleep(0.05)
        if not backlog and time.monotonic() - started > seconds_idle:
            break
    elapsed = time.monotonic() - started
    stop.set()
    await asyncio.gather(*tasks)
    await app.close()
    pickups = [picked[i] - created_at[i] for i in picked if i in created_at]
    return Run(pickups, claimed / elapsed)


ENGINES: tuple[tuple[str, Callable[[], AbstractContextManager[str]]], ...] = (
    ("MariaDB", mariadb_database),
    ("SQLite", sqlite_database),
)
FULL_BACKLOG = 10_000
QUICK_BACKLOG = 2_000


def runs_of(url_factory: Callable[[], AbstractContextManager[str]], backlog: int) -> dict[str, Run]:
    """The idle, fair and fairness-off runs, each on a fresh database."""
    runs = {}
    for name, size, fair in (("idle", 0, True), ("fair", backlog, True), ("off", backlog, False)):
        with url_factory() as url:
            runs[name] = one_run(url, backlog=size, fair=fair)
    return runs


def run(ctx: Context) -> list[Row]:
    ctx.begin_section("14 fair shares (a 10,000-operation backlog of one owner, four others)")
    backlog = QUICK_BACKLOG if ctx.quick else FULL_BACKLOG
    rows: list[Row] = []
    for engine, url_factory in ENGINES:
        rounds = [runs_of(url_factory, backlog) for _ in range(ctx.rounds)]
        pickups = [r["fair"].percentile(0.95) / r["idle"].percentile(0.95) for r in rounds]
        rates = [r["fair"].claims_per_second / r["off"].claims_per_second for r in rounds]
        shown = " | ".join(
            ", ".join(
                f"{name} {r.percentile(0.5) * 1000:.1f}/{r.percentile(0.95) * 1000:.1f} ms"
                for name, r in runs.items()
            )
            for runs in rounds
        )
        rows.append(
            Row(
                "14",
                f"B-E pickup p95 with fairness ÷ idle ({engine}, backlog {backlog:,})",
                "fair",
                "idle",
                statistics.median(pickups),
                Target("<=", 2.0),
                f"pickup p50/p95 per round: {shown}",
            )
        )
        rows.append(
            Row(
                "14",
                f"claims per second with fairness ÷ without ({engine})",
                "fair",
                "off",
                statistics.median(rates),
                Target(">=", 0.9),
                "per round: "
                + ", ".join(
                    f"{r['fair'].claims_per_second:,.0f}/s vs {r['off'].claims_per_second:,.0f}/s"
                    for r in rounds
                ),
            )
        )
    return rows


def report(
    engine: str, url_factory: Callable[[], AbstractContextManager[str]], backlog: int
) -> None:
    runs = runs_of(url_factory, backlog)
    idle, fair_run, off = runs["idle"], runs["fair"], runs["off"]
    print(f"{engine}: backlog {backlog}, load {os.getloadavg()[0]:.1f}")
    for name, run in runs.items():
        print(
            f"  {name:<5} B-E pickup p50 {run.percentile(0.5) * 1000:7.1f} ms"
            f"  p95 {run.percentile(0.95) * 1000:8.1f} ms  ({len(run.pickups)} picked)"
            f"  claims {run.claims_per_second:7.0f}/s"
        )
    print(
        f"  fair p95 / idle p95 = {fair_run.percentile(0.95) / idle.percentile(0.95):.2f}"
        f" (target <= 2); fair / off claims/s ="
        f" {fair_run.claims_per_second / off.claims_per_second:.2f} (target >= 0.9);"
        f" median pickup fair {statistics.median(fair_run.pickups) * 1000:.1f} ms"
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fairness")
    parser.add_argument("--backlog", type=int, default=FULL_BACKLOG)
    parser.add_argument("--sqlite-only", action="store_true")
    args = parser.parse_args(argv)
    report("SQLite", sqlite_database, args.backlog)
    if not args.sqlite_only:
        report("MariaDB", mariadb_database, args.backlog)


if __name__ == "__main__":
    main()
