"""Section 14, fair shares (ADR 0049); also ``python -m benchmarks.fairness [--backlog N]
[--sqlite-only]`` alone.

Owner A has ``--backlog`` (10,000) queued no-op operations; owners B-E each create one
every 100 ms; four claim loops take batches of 10 through the storage's one claim (as
the Operations service does, without gRPC), until A's backlog is gone. Printed per
engine: B-E's pickup (create to claim) p50/p95, with fairness on, off, and with no
backlog (idle), the claims per second of each run, and how long one claim took (its
statements, start to end): a pickup is at least the claim that takes the operation, so
this says how much of the pickup is the claim itself. Targets (issue 37): B-E p95 with
fairness at most 2x idle; throughput at least 0.9x fairness off. Figures, not asserts.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass

from benchmarks.context import Context
from benchmarks.databases import mariadb_database, sqlite_database
from benchmarks.table import Row, Target
from durable_ops.clock import utc_now
from durable_ops.storage import operations
from durable_ops.storage.db import Database

TASK = "bench.noop"
OTHERS = ("owner-b", "owner-c", "owner-d", "owner-e")
CLAIMERS = 4
BATCH = 10
EVERY_SECONDS = 0.1


@dataclass
class Run:
    pickups: list[float]
    claims_per_second: float
    claim_seconds: list[float]  # each claim, start to end

    def percentile(self, q: float) -> float:
        return _percentile(self.pickups, q)

    def claim_percentile(self, q: float) -> float:
        return _percentile(self.claim_seconds, q)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _create(db: Database, owner: str, key: str, fair: bool) -> str:
    request = operations.CreateRequest(
        task_type=TASK, idempotency_key=key, subject_type="bench", subject_id=key
    )
    operation, _ = db.run(
        lambda tx: operations.create(tx, request, utc_now(), fair=fair), owner_id=owner
    )
    return operation.id


def _backlog(db: Database, count: int, fair: bool) -> None:
    for n in range(count):
        _create(db, "owner-a", f"a-{n}", fair)


def one_run(url: str, *, backlog: int, fair: bool, seconds_idle: float = 3.0) -> Run:
    db = Database(url, pool_size=CLAIMERS + 2)
    try:
        _backlog(db, backlog, fair)
        created_at: dict[str, float] = {}
        picked: dict[str, float] = {}
        claim_seconds: list[float] = []
        claimed = 0
        lock = threading.Lock()
        stop = threading.Event()

        def claimer() -> None:
            nonlocal claimed
            while not stop.is_set():
                began = time.monotonic()
                taken = db.run(
                    lambda tx: operations.claim(tx, [TASK], 600, utc_now(), limit=BATCH),
                    owner_id=None,
                )
                at = time.monotonic()
                with lock:
                    claim_seconds.append(at - began)
                    claimed += len(taken)
                    for claim in taken:
                        if claim.operation.owner_user_id != "owner-a":
                            picked[claim.operation.id] = at
                if not taken:
                    time.sleep(0.005)

        def others() -> None:
            n = 0
            while not stop.is_set():
                for owner in OTHERS:
                    operation_id = _create(db, owner, f"{owner}-{n}", fair)
                    with lock:
                        created_at[operation_id] = time.monotonic()
                n += 1
                time.sleep(EVERY_SECONDS)

        threads = [threading.Thread(target=claimer) for _ in range(CLAIMERS)]
        threads.append(threading.Thread(target=others))
        started = time.monotonic()
        for thread in threads:
            thread.start()
        while True:
            time.sleep(0.05)
            with lock:
                drained = claimed - len(picked) >= backlog
            if (backlog and drained) or (not backlog and time.monotonic() - started > seconds_idle):
                break
        elapsed = time.monotonic() - started
        stop.set()
        for thread in threads:
            thread.join()
        with lock:
            pickups = [picked[i] - created_at[i] for i in picked if i in created_at]
            return Run(pickups, claimed / elapsed, claim_seconds)
    finally:
        db.dispose()


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
        runs = runs_of(url_factory, backlog)
        idle, fair_run, off = runs["idle"], runs["fair"], runs["off"]
        ms = {
            name: (r.percentile(0.5) * 1000, r.percentile(0.95) * 1000) for name, r in runs.items()
        }
        shown = "; ".join(f"{n} p50 {p50:.1f} / p95 {p95:.1f} ms" for n, (p50, p95) in ms.items())
        shown += "; one claim p50/p95: " + ", ".join(
            f"{n} {r.claim_percentile(0.5) * 1000:.1f}/{r.claim_percentile(0.95) * 1000:.1f} ms"
            for n, r in runs.items()
        )
        rows.append(
            Row(
                "14",
                f"B-E pickup p95 with fairness ÷ idle ({engine}, backlog {backlog:,})",
                "fair",
                "idle",
                fair_run.percentile(0.95) / idle.percentile(0.95),
                Target("<=", 2.0),
                f"one run each (a backlog drains once); {shown}",
            )
        )
        rows.append(
            Row(
                "14",
                f"claims per second with fairness ÷ without ({engine})",
                "fair",
                "off",
                fair_run.claims_per_second / off.claims_per_second,
                Target(">=", 0.9),
                f"{fair_run.claims_per_second:,.0f}/s vs {off.claims_per_second:,.0f}/s",
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
            f"  one claim p50 {run.claim_percentile(0.5) * 1000:5.1f} ms"
            f" p95 {run.claim_percentile(0.95) * 1000:5.1f} ms"
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
