"""Figure 11: one beat of a worker's lease stream against the same leases on single streams.

``N`` claimed operations of four owners are held twice over, on MariaDB,
through an in-process Operations server: on one ``HoldLeases`` stream (ADR 26),
where a beat extends all of them, and on ``N`` single ``Heartbeat`` streams
beaten together (16 in flight), as workers did before. Beats alternate
between the two; the figure is the median time of one beat of all ``N`` leases,
with the statements and COMMITs each sent (the cancel watch's shared poll
left out).
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from benchmarks.context import Context
from benchmarks.databases import mariadb_database
from benchmarks.table import Row, Target
from durable_ops.clock import utc_now
from durable_ops.storage.db import Database
from tests.support.grpc_services import running_services
from tests.support.operations_client import OWNER_IDS, OpsClient

SECTION = "11"
SIZES = (10, 100)
LEASE_SECONDS = 60
TARGET = Target("<=", 0.5)


class Counts:
    """Statements and COMMITs an engine sends, but the cancel watch's poll."""

    def __init__(self, db: Database) -> None:
        self._lock = threading.Lock()
        self.statements = 0
        self.commits = 0
        db.listen("before_cursor_execute", self._statement)
        db.listen("commit", self._commit)

    def _statement(self, _conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.startswith("SELECT user_operations.id") and "cancel_requested" in statement:
            return
        with self._lock:
            self.statements += 1

    def _commit(self, *_: Any) -> None:
        with self._lock:
            self.commits += 1

    def measure(self, beat: Callable[[], object]) -> tuple[float, int, int]:
        """Seconds, statements and COMMITs of one call of ``beat``."""
        statements, commits = self.statements, self.commits
        started = time.perf_counter()
        beat()
        elapsed = time.perf_counter() - started
        return elapsed, self.statements - statements, self.commits - commits


def _row(size: int, one: list[tuple[float, int, int]], single: list[tuple[float, int, int]]) -> Row:
    def median(samples: list[tuple[float, int, int]], n: int) -> float:
        return statistics.median(sample[n] for sample in samples)

    return Row(
        SECTION,
        f"one beat of {size} leases: one HoldLeases stream ÷ {size} Heartbeat streams",
        f"{median(one, 0) * 1000:.1f} ms, {median(one, 1):g} statements, "
        f"{median(one, 2):g} COMMITs",
        f"{median(single, 0) * 1000:.1f} ms, {median(single, 1):g} statements, "
        f"{median(single, 2):g} COMMITs",
        median(one, 0) / median(single, 0),
        TARGET,
        "MariaDB, in-process server; a beat of the shared cancel poll may land in a sample",
    )


def _measured(size: int, beats: int) -> Row:
    with mariadb_database() as url, running_services(url, utc_now) as services:
        ops = OpsClient(services)
        for n in range(size):
            ops.create(OWNER_IDS[n % len(OWNER_IDS)], f"bench-{n}", subject_id=f"s-{n}")
        leases = [ops.claim_one(lease_seconds=LEASE_SECONDS) for _ in range(size)]
        counts = Counts(services.db)
        stream = ops.lease_stream()
        stream.beat(tuple(leases), lease_seconds=LEASE_SECONDS)
        singles = [ops.stream(lease) for lease in leases]
        with ThreadPoolExecutor(16) as pool:

            def beat_singles() -> None:
                list(pool.map(lambda one: one.beat(lease_seconds=LEASE_SECONDS), singles))

            beat_singles()
            one_stream, single_streams = [], []
            for _ in range(beats):
                one_stream.append(counts.measure(stream.beat))
                single_streams.append(counts.measure(beat_singles))
        stream.close()
        for one in singles:
            one.close()
    return _row(size, one_stream, single_streams)


def run(ctx: Context) -> list[Row]:
    ctx.begin_section("11 lease stream")
    beats = ctx.pick(10, 30)
    return [_measured(size, beats) for size in SIZES]
