"""Section 10: a three-node Galera cluster (``scripts/galera.sh``) against one of its nodes.

The same lifecycle loop (create, claim, heartbeat, complete: four commits) runs
with six threads either all through node 1, or two through each node; the
figure is lifecycles/s through three nodes ÷ through one. Every write is
replicated to all three nodes either way, so the ratio shows what spreading
the clients costs or gains (certification conflicts against more nodes doing
the work). Two absolute figures follow: 1213 replays per 1,000 claims through
three nodes with the claim spread over the head of the queue (the product on
Galera, ADR 0017) and with every claim taking the head (as on one server).

The cluster is the benchmark's own (a temporary folder, ports 35311… unless
``GALERA_PORT_BASE`` and friends say otherwise) and is stopped at the end.
Needs root and galera-4; otherwise the section prints one n/a row.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import count
from pathlib import Path

import pymysql
from sqlalchemy.engine import make_url

from benchmarks.context import Context
from benchmarks.stats import interleave
from benchmarks.table import Row
from durable_ops.clock import utc_now
from durable_ops.model.held_leases import HeldLease
from durable_ops.model.lifecycle import Event
from durable_ops.storage import migrate, operations
from durable_ops.storage.db import Database
from durable_ops.storage.operations import claims

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "galera.sh"
PROVIDER = Path("/usr/lib/galera/libgalera_smm.so")
PORTS = {
    "GALERA_PORT_BASE": os.environ.get("GALERA_PORT_BASE", "35311"),
    "GALERA_GROUP_PORT_BASE": os.environ.get("GALERA_GROUP_PORT_BASE", "36567"),
    "GALERA_SST_PORT_BASE": os.environ.get("GALERA_SST_PORT_BASE", "37444"),
}
THREADS = 6
TASK = "bench.galera"
OWNER = "bench"


def _galera(*args: str, where: Path) -> list[str]:
    done = subprocess.run(
        [str(SCRIPT), *args, str(where)],
        env={**os.environ, **PORTS},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return done.stdout.split()


@contextmanager
def _cluster() -> Iterator[list[str]]:
    where = Path(tempfile.mkdtemp(prefix="durable-ops-bench-galera-"))
    where.chmod(0o755)
    try:
        urls = _galera("start", "3", where=where)
        yield urls
    finally:
        _galera("stop", "3", where=where)
        shutil.rmtree(where, ignore_errors=True)


def _database(urls: list[str], name: str) -> list[str]:
    first = make_url(urls[0])
    with (
        pymysql.connect(host=first.host, port=first.port or 3306, user="root") as conn,
        conn.cursor() as cursor,
    ):
        cursor.execute(f"DROP DATABASE IF EXISTS {name}")
        cursor.execute(f"CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
    named = [make_url(url).set(database=name).render_as_string(hide_password=False) for url in urls]
    migrate.upgrade(named[0])
    return named


class _Run:
    """Lifecycles through the given nodes: the rate and the 1213 replays per 1,000 claims."""

    def __init__(self, databases: list[Database], total: int) -> None:
        self.databases = databases
        self.total = total
        self._keys = count()
        self._lock = threading.Lock()
        self.claims = 0

    def _lifecycle(self, db: Database) -> bool:
        with self._lock:
            key = next(self._keys)
        if key >= self.total:
            return False
        request = operations.CreateRequest(
            task_type=TASK, idempotency_key=f"k{key}-{time.monotonic_ns()}", subject_type="job",
            subject_id="j",
        )  # fmt: skip
        now = utc_now()
        db.run(lambda tx: operations.create(tx, request, now), owner_id=OWNER)
        taken: list[operations.Claim] = []
        while not taken:
            taken = db.run(lambda tx: operations.claim(tx, [TASK], 60, utc_now()), owner_id=None)
        with self._lock:
            self.claims += 1
        op_id, token = taken[0].operation.id, taken[0].lease_token
        lease = HeldLease(op_id, OWNER, token, 60, 50)
        db.run(lambda tx: operations.heartbeat(tx, lease, utc_now()), owner_id=OWNER)
        completion = operations.Settlement(OWNER, op_id, token, Event.COMPLETE)
        db.run(lambda tx: operations.settle_one(tx, completion, utc_now()), owner_id=OWNER)
        return True

    def __call__(self) -> float:
        before = sum(db.retries[1213] for db in self.databases)
        self._keys = count()
        self.claims = 0

        def loop(db: Database) -> None:
            while self._lifecycle(db):
                pass

        threads = [
            threading.Thread(target=loop, args=(self.databases[n % len(self.databases)],))
            for n in range(THREADS)
        ]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        seconds = time.perf_counter() - started
        self.replays = sum(db.retries[1213] for db in self.databases) - before
        return self.total / seconds

    @property
    def replays_per_thousand(self) -> float:
        return 1000 * self.replays / max(self.claims, 1)


def _unavailable() -> str | None:
    if os.geteuid() != 0:
        return "needs root (the nodes run as the mysql user)"
    if not PROVIDER.exists() or shutil.which("mariadbd") is None:
        return "galera-4 and mariadb-server are not installed"
    return None


def run(ctx: Context) -> list[Row]:
    ctx.begin_section("10 Galera: three nodes vs one")
    reason = _unavailable()
    if reason is not None:
        return [Row("10", "lifecycles/s through 3 Galera nodes ÷ through 1", "", "", math.nan,
                    note=reason)]  # fmt: skip
    total = ctx.pick(150, 600)
    with _cluster() as urls:
        named = _database(urls, "bench_galera")
        databases = [Database(url, pool_size=THREADS) for url in named]
        try:
            three, one = _Run(databases, total), _Run(databases[:1], total)
            paired = interleave(ctx.rounds, three, one)
            spread = three.replays_per_thousand
            original = claims.spreads
            claims.spreads = lambda tx: False
            try:
                head = _Run(databases, total)
                head()
            finally:
                claims.spreads = original
        finally:
            for db in databases:
                db.dispose()
    return [
        Row(
            "10",
            "lifecycles/s through 3 Galera nodes ÷ through 1 node of the same cluster",
            f"{paired.subject_median:.0f}/s",
            f"{paired.baseline_median:.0f}/s",
            paired.ratio,
            None,
            f"{THREADS} threads, {total} lifecycles (create, claim, heartbeat, complete) per"
            " round on a loopback cluster; per-round ratios "
            + ", ".join(f"{r:.2f}" for r in paired.ratios),
        ),
        Row("10", "1213 replays per 1,000 claims, 3 nodes, claims spread over the head", "",
            "", spread, None, unit=""),
        Row("10", "1213 replays per 1,000 claims, 3 nodes, every claim takes the head", "",
            "", head.replays_per_thousand, None, unit=""),
    ]  # fmt: skip
