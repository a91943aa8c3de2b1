"""Figure 13, the soak (issue 40 point 5): N minutes of steady mixed load, a row a minute.

The stack runs as real processes on a fresh MariaDB database
(``benchmarks.processes.ai_stack``: two Operations replicas behind one
round-robin target, Notifications, Workspace, AI Admission, the development
model and the AI worker; ``opsctl serve gateway`` in front of them) plus one
SDK worker process of our own (``benchmarks.soak_worker``). This process is the
load, steady for the whole run (``Load``):

- creates over gRPC (``CreateOperation``, producer credential) of the task type
  ``soak.work``, spread over the owners; each one's subject plans what the SDK
  worker does with it (``plan_subject``): most hold their lease a moment and
  complete, some hold it across several heartbeats of the worker's lease
  stream, some fail for good and some fail once and are retried; a few are
  sent twice with the same idempotency key (the answer must name the same
  operation) and a few are cancelled over HTTP soon after;
- creates over HTTP: a job, then ``POST /api/jobs/{id}/strategy-snapshot``
  with an ``Idempotency-Key``, run by the AI worker on the development model;
- long-polls ``GET /api/operations/{id}:wait`` on recent operations;
- one ``GET /api/events`` stream per owner, held the whole run (reopened if it
  drops, which is counted);
- notifications listed, their unread count read and unread ones marked read.

Every minute it prints a row and keeps it (``Minute``): each process's RSS
(``VmRSS`` of ``/proc/PID/status``) and open file descriptors (the entries of
``/proc/PID/fd``); p50 and p99 of the create latency that minute (gRPC and
HTTP apart: request sent → answer read, by this process) and of the pickup
latency (a gRPC create acknowledged → the SDK worker's handler starting the
first attempt, both on this machine's wall clock; it can be slightly negative
when the worker starts before the answer has reached this process); and the
database's connections: the server's ``Threads_connected`` (the server is
shared, so other clients count there too), ``information_schema.PROCESSLIST``
by user, the connections to this run's own database, and each process's own
(its sockets connected to the server's port, from ``/proc``: a pool as the
process holds it). Also kept: each process's CPU over the minute (``soak-load``
is this process; the printed row shows their sum), and the calls of the minute
by kind and answer. A sample belongs to the minute in which it ended.

Targets (printed MET / NOT MET, never asserted by a test), for runs of at
least ``MIN_MINUTES_FOR_TARGETS`` minutes. The *baseline* is minutes 4 to 6
(the 4th, 5th and 6th rows: start-up and warm caches behind them), the *end*
the last three minutes; a figure of a window is the median of its three rows,
which one odd minute cannot move:

- RSS, every process: median RSS of the end ≤ 1.1 times the median RSS of the baseline;
- p99 drift, gRPC create, HTTP create and pickup: median of the end's per-minute
  p99 ≤ 1.2 times the baseline's;
- no fd growth, every process: median open fds of the end ≤ the most the process
  had open in any minute of the baseline; the same rule for the connections to
  the run's database (no connection leak).

When the load stops the run waits (bounded) for the operations to end, then
audits the database: every acknowledged create is there (none lost), each
repeated create named the same operation, every terminal operation has exactly
one notification and no other operation has one, and no process died.
``tests/e2e/test_soak.py`` runs two minutes of it and asserts exactly these
invariants and the series' shape, not the timing targets.

Run by hand or nightly: ``python -m benchmarks.soak --minutes 30`` (writes
``benchmarks/soak.json``, ``benchmarks/soak.png`` and, with ``--results``, its
section of ``benchmarks/RESULTS.md``), or as section 15 of ``python -m
benchmarks --only 15 --minutes N`` (``--nightly``: every section and the soak).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import secrets
import signal
import sys
import tempfile
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import httpx
from sqlalchemy.engine import make_url

from benchmarks import machine
from benchmarks.context import Context
from benchmarks.databases import mariadb_connect, mariadb_database
from benchmarks.processes import (
    JWT_SECRET,
    LOG_DIR,
    ai_stack,
    gateway_pid,
    gateway_server,
    keys_dir,
    process_cpu_seconds,
)
from benchmarks.soak_worker import HELD_MS, parse_subject
from benchmarks.stats import median, percentile
from benchmarks.table import Row, Target, render_text
from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.api.operations.v1 import operations_pb2_grpc as pb_grpc
from durable_ops.gateway.auth import mint_user_token
from durable_ops.model.scope import Role
from durable_ops.rpc.client import ServiceCaller, open_channel
from durable_ops.rpc.keys import SigningKey, private_key_path
from durable_ops.storage import migrate
from durable_ops.up import grant_ai

TASK_TYPE = "soak.work"
TERMINAL = ("succeeded", "failed", "cancelled")
RSS_GROWTH = Target("<=", 1.1)
P99_DRIFT = Target("<=", 1.2)
NO_GROWTH = Target("<=", 1.0)
BASELINE_MINUTES = (4, 5, 6)
END_MINUTES = 3
MIN_MINUTES_FOR_TARGETS = 9  # baseline 4-6 and an end window after it that does not touch it
KEEPALIVE_SECONDS = 2.0  # an idle client connection's life: under the gateway's 5 s
MINUTE_SECONDS = 60.0
HERE = Path(__file__).resolve().parent
RESULTS = HERE / "RESULTS.md"
# The soak's section of RESULTS.md, and within it the block a ``--results`` run rewrites
# (what is written by hand around it stays).
SECTION_BEGIN = "<!-- soak:begin -->"
SECTION_END = "<!-- soak:end -->"
BEGIN_MARK = "<!-- soak-run:begin -->"
END_MARK = "<!-- soak-run:end -->"
JOB = {
    "title": "Platform Engineer",
    "company": "Initech",
    "description": (
        "We run Python services on MariaDB and Kubernetes. Requirements: Python, SQL, gRPC,"
        " observability and on-call experience."
    ),
}


@dataclass(frozen=True)
class Load:
    """The steady mix. Defaults: about 300 operations a minute on a 2-core machine, a fifth
    of its CPU, so the figures show the product's drift rather than a saturated host."""

    owners: int = 6
    grpc_creates_per_second: float = 4.0
    http_creates_per_second: float = 0.4
    long_polls: int = 4  # concurrent long-poll loops
    long_poll_seconds: int = 5
    notification_reads_per_second: float = 1.0
    long_hold_share: float = 0.05  # held across several beats of a 10-s lease
    long_hold_ms: int = 20_000
    medium_hold_share: float = 0.15  # held a few seconds: joins the lease stream
    medium_hold_ms: int = 3_000
    fail_share: float = 0.04
    retry_share: float = 0.04
    cancel_share: float = 0.03
    repeat_share: float = 0.02  # the same create sent again: must answer the same operation
    drain_seconds: float = 90.0  # after the load: how long operations may take to end
    model_seconds: float = 0.5  # the development model's time per answer


# The CI test's mix: the same, with long holds short enough to end within its drain.
CI_LOAD = Load(long_hold_ms=6_000, drain_seconds=60.0)


def plan_subject(rng: random.Random, load: Load) -> str:
    """What the SDK worker does with one gRPC-created operation, as its subject id
    (``benchmarks.soak_worker.parse_subject`` reads it)."""
    draw = rng.random()
    if draw < load.long_hold_share:
        hold = load.long_hold_ms
    elif draw < load.long_hold_share + load.medium_hold_share:
        hold = load.medium_hold_ms
    else:
        hold = rng.randint(20, 300)
    ending = rng.random()
    if ending < load.fail_share:
        return f"hold-{hold}-fail"
    if ending < load.fail_share + load.retry_share:
        return f"hold-{hold}-retry"
    return f"hold-{hold}-ok"


# ---- the series ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Latency:
    count: int
    p50_ms: float
    p99_ms: float

    @classmethod
    def of(cls, seconds: Sequence[float]) -> Latency:
        if not seconds:
            return cls(0, math.nan, math.nan)
        ms = [s * 1000 for s in seconds]
        return cls(len(ms), percentile(ms, 50), percentile(ms, 99))


@dataclass
class Minute:
    """One row of the series: the state at the minute's end, the latencies within it."""

    minute: int  # 1 for the first minute of load
    ended_at: str  # UTC, RFC 3339
    rss_kib: dict[str, int]  # process label → VmRSS; a process that died is missing
    fds: dict[str, int]
    create_grpc: Latency
    create_http: Latency
    pickup: Latency
    db_threads_connected: int  # the whole server's
    db_by_user: dict[str, int]
    db_ours: int  # connections to this run's database
    # each process's open connections to the database server (its sockets to the server's
    # port, counted from /proc: a pool's size as the process sees it)
    db_held: dict[str, int]
    counts: dict[str, int]  # calls of the minute by kind (creates, long-polls, events, ...)
    # each process's CPU over the minute, % of one core ("soak-load": this load generator)
    cpu_percent: dict[str, float]
    load: float  # the machine's 1-minute load average


def latency_of(row: Mapping[str, Any] | Minute, name: str) -> float:
    value = getattr(row, name) if isinstance(row, Minute) else row[name]
    return float(value.p99_ms if isinstance(value, Latency) else value["p99_ms"])


def window(series: Sequence[Minute], minutes: Iterable[int]) -> list[Minute]:
    chosen = set(minutes)
    return [row for row in series if row.minute in chosen]


def end_window(series: Sequence[Minute]) -> list[Minute]:
    return list(series[-END_MINUTES:])


def _ratio(end: float, baseline: float) -> float:
    if math.isnan(end) or math.isnan(baseline) or baseline <= 0:
        return math.nan
    return end / baseline


def _median_of(values: Sequence[float]) -> float:
    present = [v for v in values if not math.isnan(v)]
    return median(present) if present else math.nan


def verdict_rows(series: Sequence[Minute], processes: Sequence[str]) -> list[Row]:
    """The targets of the module's docstring, as rows of the benchmarks' table."""
    if len(series) < MIN_MINUTES_FOR_TARGETS:
        return [
            Row(
                "15",
                f"drift targets need a run of at least {MIN_MINUTES_FOR_TARGETS} minutes",
                f"{len(series)} minute{'' if len(series) == 1 else 's'} run",
                "",
                math.nan,
                None,
            )
        ]
    base, end = window(series, BASELINE_MINUTES), end_window(series)
    first, last = BASELINE_MINUTES[0], BASELINE_MINUTES[-1]
    span = f"minutes {first}-{last} vs {end[0].minute}-{end[-1].minute}"
    rows: list[Row] = []
    for name in processes:
        before = _median_of([float(r.rss_kib.get(name, math.nan)) for r in base])
        after = _median_of([float(r.rss_kib.get(name, math.nan)) for r in end])
        rows.append(
            Row(
                "15",
                f"RSS growth, {name} (median of the end ÷ of the baseline)",
                f"{after / 1024:.1f} MiB",
                f"{before / 1024:.1f} MiB",
                _ratio(after, before),
                RSS_GROWTH,
            )
        )
    for label, attribute in (
        ("gRPC create", "create_grpc"),
        ("HTTP create", "create_http"),
        ("pickup", "pickup"),
    ):
        before = _median_of([latency_of(r, attribute) for r in base])
        after = _median_of([latency_of(r, attribute) for r in end])
        rows.append(
            Row(
                "15",
                f"p99 drift, {label} (median per-minute p99, end ÷ baseline)",
                f"{after:.0f} ms",
                f"{before:.0f} ms",
                _ratio(after, before),
                P99_DRIFT,
            )
        )
    for name in processes:
        most = max((r.fds.get(name, 0) for r in base), default=0)
        after = _median_of([float(r.fds[name]) for r in end if name in r.fds])
        rows.append(
            Row(
                "15",
                f"open fds, {name} (median of the end ÷ most of the baseline)",
                f"{after:.0f}",
                f"{most}",
                _ratio(after, float(most)),
                NO_GROWTH,
            )
        )
    most_db = max((r.db_ours for r in base), default=0)
    after_db = _median_of([float(r.db_ours) for r in end])
    rows.append(
        Row(
            "15",
            "database connections to the run's schema (median of the end ÷ most of the baseline)",
            f"{after_db:.0f}",
            f"{most_db}",
            _ratio(after_db, float(most_db)),
            NO_GROWTH,
            f"{span}; a figure of a window is the median of its rows",
        )
    )
    return rows


# ---- what the processes use ---------------------------------------------------------------


def rss_kib(pid: int) -> int | None:
    """``VmRSS`` of ``/proc/PID/status`` in KiB; None once the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


def _socket_inodes_to(port: int) -> set[str]:
    """The inodes of this machine's TCP sockets (IPv4 and IPv6) connected to ``port``."""
    found: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(FileNotFoundError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                remote_port = int(fields[2].rsplit(":", 1)[1], 16)
                if remote_port == port and fields[3] == "01":  # ESTABLISHED
                    found.add(fields[9])
    return found


def database_sockets(pids: Mapping[str, int], port: int) -> dict[str, int]:
    """How many connections to the database server's ``port`` each process holds open:
    its fds that are sockets (``/proc/PID/fd``) among those connected to the port."""
    inodes = _socket_inodes_to(port)
    held: dict[str, int] = {}
    for name, pid in pids.items():
        count = 0
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                    link = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if link.startswith("socket:[") and link[8:-1] in inodes:
                        count += 1
        held[name] = count
    return held


def _cpu_seconds(pids: Mapping[str, int]) -> dict[str, float]:
    """User plus system CPU each live process has used so far."""
    used: dict[str, float] = {}
    for name, pid in pids.items():
        with contextlib.suppress(FileNotFoundError, ProcessLookupError, IndexError):
            used[name] = process_cpu_seconds(pid)
    return used


def open_fds(pid: int) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except (FileNotFoundError, ProcessLookupError):
        return None


def database_connections(url: str) -> tuple[int, dict[str, int], int]:
    """The server's ``Threads_connected``, PROCESSLIST's connections by user, and those
    whose schema is ``url``'s database. Asked on a connection of its own, to no schema (so
    not counted among the run's)."""
    parsed = make_url(url)
    database = parsed.database
    server = parsed.set(database="").render_as_string(hide_password=False)
    conn = mariadb_connect(server, autocommit=True)
    try:
        with conn.cursor() as cursor:
            cursor.execute("SHOW GLOBAL STATUS LIKE 'Threads_connected'")
            found = cursor.fetchone()
            threads = int(found[1]) if found else 0
            cursor.execute(
                "SELECT USER, DB, COUNT(*) FROM information_schema.PROCESSLIST"
                " WHERE COMMAND <> 'Daemon' GROUP BY USER, DB"
            )
            by_user: Counter[str] = Counter()
            ours = 0
            for user, schema, count in cursor.fetchall():
                by_user[str(user)] += int(count)
                if schema == database:
                    ours += int(count)
            return threads, dict(by_user), ours
    finally:
        conn.close()


# ---- the load -----------------------------------------------------------------------------


@dataclass
class Tally:
    """What happened this minute (latencies, counts) and over the run (acknowledged ids)."""

    create_grpc: list[float] = field(default_factory=list)
    create_http: list[float] = field(default_factory=list)
    pickup: list[float] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    acknowledged: set[str] = field(default_factory=set)
    repeat_mismatches: list[str] = field(default_factory=list)
    # gRPC creates acknowledged whose first attempt has not been seen to start (→ ack time),
    # and first attempts seen before the acknowledgement reached us (→ start time).
    waiting_pickup: dict[str, float] = field(default_factory=dict)
    early_starts: dict[str, float] = field(default_factory=dict)
    # (owner, id) of recent gRPC creates, and of those held long enough to be waited on
    recent: deque[tuple[str, str]] = field(default_factory=lambda: deque(maxlen=200))
    recent_held: deque[tuple[str, str]] = field(default_factory=lambda: deque(maxlen=50))

    def take_minute(self) -> tuple[list[float], list[float], list[float], dict[str, int]]:
        taken = (self.create_grpc, self.create_http, self.pickup, dict(self.counts))
        self.create_grpc, self.create_http, self.pickup = [], [], []
        self.counts = Counter()
        return taken

    def acknowledged_grpc(self, operation_id: str, at: float) -> None:
        started = self.early_starts.pop(operation_id, None)
        if started is None:
            self.waiting_pickup[operation_id] = at
        else:
            self.pickup.append(started - at)

    def started(self, operation_id: str, at: float) -> None:
        acknowledged = self.waiting_pickup.pop(operation_id, None)
        if acknowledged is None:
            self.early_starts[operation_id] = at
        else:
            self.pickup.append(at - acknowledged)


class Soak:
    """The load generator: every loop runs until ``stop`` is set."""

    def __init__(
        self,
        target: str,
        gateway: str,
        load: Load,
        run_id: str,
        tally: Tally,
        stop: asyncio.Event,
    ) -> None:
        self.load = load
        self.run_id = run_id
        self.tally = tally
        self.stop = stop
        self.owners = [f"soak-{run_id}-{n}" for n in range(load.owners)]
        self.rng = random.Random(run_id)
        self._channel = open_channel(target, None)
        self._stub = pb_grpc.OperationsServiceStub(self._channel)
        self._producer = ServiceCaller(SigningKey.load(private_key_path(keys_dir(), "producer")))
        self._http = {
            owner: httpx.AsyncClient(
                base_url=gateway,
                headers={"Authorization": f"Bearer {mint_user_token(JWT_SECRET, owner, 86400)}"},
                timeout=httpx.Timeout(30.0),
                # An idle connection is let go before the gateway's (uvicorn's 5 s) would
                # close it: else a request sent on it as it closes fails, as a browser's
                # would be retried (a client's race, not the product's).
                limits=httpx.Limits(keepalive_expiry=KEEPALIVE_SECONDS),
            )
            for owner in self.owners
        }
        self._background: set[asyncio.Task[None]] = set()

    async def close(self) -> None:
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        for client in self._http.values():
            await client.aclose()
        await self._channel.close()

    def loops(self) -> list[asyncio.Task[None]]:
        load = self.load
        made = [
            self._paced(load.grpc_creates_per_second, self._create_grpc),
            self._paced(load.http_creates_per_second, self._create_http),
            self._paced(load.notification_reads_per_second, self._read_notifications),
            *(self._long_poll() for _ in range(load.long_polls)),
            *(self._events(owner) for owner in self.owners),
        ]
        return [asyncio.create_task(coroutine) for coroutine in made]

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.create_task(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _paced(self, per_second: float, call: Callable[[int], Any]) -> None:
        """``call(n)`` started every 1/``per_second`` s on a fixed schedule, each on its own
        task (a slow answer does not slow the offered load; that would hide the drift)."""
        if per_second <= 0:
            return
        loop = asyncio.get_running_loop()
        period, started, n = 1.0 / per_second, loop.time(), 0
        while not self.stop.is_set():
            self._spawn(self._counted(call, n))
            n += 1
            delay = started + n * period - loop.time()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), max(delay, 0.0))

    async def _counted(self, call: Callable[[int], Any], n: int) -> None:
        try:
            await call(n)
        except (grpc.aio.AioRpcError, httpx.HTTPError, OSError) as exc:
            self.tally.counts[f"error {type(exc).__name__}"] += 1

    async def _create_grpc(self, n: int) -> None:
        owner = self.owners[n % len(self.owners)]
        subject = plan_subject(self.rng, self.load)
        key = f"{self.run_id}-g-{n}"
        request = pb.CreateOperationRequest(
            task_type=TASK_TYPE,
            idempotency_key=key,
            subject=pb.Subject(type="soak", id=subject),
            max_attempts=3,
            retry_delay_seconds=1,
        )
        metadata = self._producer.metadata(owner)
        sent = time.perf_counter()
        reply = await self._stub.CreateOperation(request, metadata=metadata, timeout=30)
        self.tally.create_grpc.append(time.perf_counter() - sent)
        operation_id = reply.operation.id
        self.tally.acknowledged.add(operation_id)
        self.tally.acknowledged_grpc(operation_id, time.time())
        self.tally.recent.append((owner, operation_id))
        if parse_subject(subject)[0] >= HELD_MS:
            self.tally.recent_held.append((owner, operation_id))
        self.tally.counts["create grpc"] += 1
        if self.rng.random() < self.load.repeat_share:
            again = await self._stub.CreateOperation(request, metadata=metadata, timeout=30)
            self.tally.counts["create repeated"] += 1
            if again.operation.id != operation_id:
                self.tally.repeat_mismatches.append(key)
        if self.rng.random() < self.load.cancel_share:
            await asyncio.sleep(self.rng.uniform(0.05, 1.0))
            answer = await self._http[owner].post(f"/api/operations/{operation_id}/cancel")
            # 409: it had ended already; either is a correct answer to a late cancel
            self.tally.counts[f"cancel {answer.status_code}"] += 1

    async def _create_http(self, n: int) -> None:
        owner = self.owners[n % len(self.owners)]
        http = self._http[owner]
        job = await http.post("/api/jobs", json=JOB)
        job.raise_for_status()
        sent = time.perf_counter()
        answer = await http.post(
            f"/api/jobs/{job.json()['id']}/strategy-snapshot",
            json={},
            headers={"Idempotency-Key": f"{self.run_id}-h-{n}"},
        )
        if answer.status_code == 202:
            self.tally.create_http.append(time.perf_counter() - sent)
            self.tally.acknowledged.add(str(answer.json()["operation_id"]))
        self.tally.counts[f"create http {answer.status_code}"] += 1

    async def _long_poll(self) -> None:
        """A page following one operation: mostly one held for seconds (the wait waits),
        at most one poll a second per loop (one on an ended operation answers at once)."""
        loop = asyncio.get_running_loop()
        while not self.stop.is_set():
            began = loop.time()
            held = self.tally.recent_held
            pool = held if held and self.rng.random() < 0.8 else self.tally.recent
            if not pool:
                await asyncio.sleep(0.5)
                continue
            owner, operation_id = self.rng.choice(pool)
            try:
                answer = await self._http[owner].get(
                    f"/api/operations/{operation_id}:wait",
                    params={"timeout": self.load.long_poll_seconds},
                )
                self.tally.counts[f"long-poll {answer.status_code}"] += 1
            except httpx.HTTPError as exc:
                self.tally.counts[f"error long-poll {type(exc).__name__}"] += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), max(0.0, began + 1.0 - loop.time()))

    async def _read_notifications(self, n: int) -> None:
        http = self._http[self.owners[n % len(self.owners)]]
        listed = await http.get("/api/notifications", params={"page_size": 20})
        unread = await http.get("/api/notifications/unread-count")
        self.tally.counts[f"notifications {listed.status_code}/{unread.status_code}"] += 1
        if listed.status_code != 200:
            return
        for item in [i for i in listed.json()["items"] if i["read_at"] is None][:3]:
            marked = await http.post(f"/api/notifications/{item['id']}/read")
            self.tally.counts[f"read {marked.status_code}"] += 1

    async def _events(self, owner: str) -> None:
        """The owner's page: one ``/api/events`` stream, reopened when it drops."""
        http = self._http[owner]
        opened = 0
        while not self.stop.is_set():
            try:
                async with http.stream(
                    "GET", "/api/events", timeout=httpx.Timeout(10.0, read=None)
                ) as response:
                    self.tally.counts[f"events open {response.status_code}"] += 1
                    opened += 1
                    if opened > 1:
                        self.tally.counts["events reopened"] += 1
                    async for line in response.aiter_lines():
                        if line.startswith("event: "):
                            self.tally.counts["event " + line.removeprefix("event: ")] += 1
                        if self.stop.is_set():
                            break
            except httpx.HTTPError as exc:
                self.tally.counts[f"error events {type(exc).__name__}"] += 1
            if not self.stop.is_set():
                await asyncio.sleep(1.0)


# ---- the run ------------------------------------------------------------------------------


@dataclass
class Audit:
    acknowledged: int
    lost: list[str]
    repeat_mismatches: list[str]
    outcomes: dict[str, int]
    not_terminal: list[str]
    notifications_wrong: dict[str, int]  # operation id → its notifications, where not 1/0
    died: dict[str, int | None]  # process label → its exit code, for each that ended


@dataclass
class SoakRun:
    minutes: int
    load: Load
    processes: list[str]
    series: list[Minute]
    audit: Audit
    started_at: str
    machine: str


def audit_database(url: str, acknowledged: set[str]) -> tuple[dict[str, str], dict[str, int]]:
    """Every operation's state, and each operation's notifications (one read moment)."""
    conn = mariadb_connect(url, autocommit=False)
    try:
        with conn.cursor() as cursor:
            cursor.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
            cursor.execute("SELECT id, state FROM user_operations")
            states = {str(i): str(s) for i, s in cursor.fetchall()}
            cursor.execute(
                "SELECT operation_id, COUNT(*) FROM user_notifications"
                " WHERE operation_id IS NOT NULL GROUP BY operation_id"
            )
            notified = {str(i): int(c) for i, c in cursor.fetchall()}
            conn.commit()
    finally:
        conn.close()
    return states, notified


def judge(
    states: Mapping[str, str],
    notified: Mapping[str, int],
    acknowledged: set[str],
    repeat_mismatches: Sequence[str],
    died: dict[str, int | None],
) -> Audit:
    wrong = {
        operation_id: notified.get(operation_id, 0)
        for operation_id, state in states.items()
        if notified.get(operation_id, 0) != (1 if state in TERMINAL else 0)
    }
    wrong.update({i: c for i, c in notified.items() if i not in states})
    return Audit(
        acknowledged=len(acknowledged),
        lost=sorted(acknowledged - set(states)),
        repeat_mismatches=list(repeat_mismatches),
        outcomes=dict(Counter(states.values())),
        not_terminal=sorted(i for i, s in states.items() if s not in TERMINAL),
        notifications_wrong=wrong,
        died=died,
    )


def _pids(stack_children: Mapping[str, Any], gateway: str, worker_pid: int) -> dict[str, int]:
    pids = {label: child.process.pid for label, child in stack_children.items()}
    pids["gateway"] = gateway_pid(gateway)
    pids["sdk-worker"] = worker_pid
    return pids


def _fmt_latency(value: Latency) -> str:
    if not value.count:
        return "-"
    return f"{value.p50_ms:.0f}/{value.p99_ms:.0f}"


def row_text(row: Minute, processes: Sequence[str], header: bool = False) -> str:
    """One printed line of the series (with ``header``, the column names first)."""
    names = [
        "min",
        *(f"{p[:12]} MiB/fd" for p in processes),
        "gRPC create p50/p99 ms",
        "HTTP create",
        "pickup",
        "db conns all/ours",
        "ops/min",
        "CPU % all",
        "load",
    ]
    cells = [
        str(row.minute),
        *(
            f"{row.rss_kib[p] / 1024:.0f}/{row.fds[p]}" if p in row.rss_kib else "DIED"
            for p in processes
        ),
        _fmt_latency(row.create_grpc),
        _fmt_latency(row.create_http),
        _fmt_latency(row.pickup),
        f"{row.db_threads_connected}/{row.db_ours}",
        str(row.create_grpc.count + row.create_http.count),
        f"{sum(row.cpu_percent.values()):.0f}",
        f"{row.load:.2f}",
    ]
    widths = [max(len(n), len(c)) for n, c in zip(names, cells, strict=True)]
    line = "  ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True))
    if not header:
        return line
    return "  ".join(n.rjust(w) for n, w in zip(names, widths, strict=True)) + "\n" + line


async def _worker_process(target: str, key: Path) -> asyncio.subprocess.Process:
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    log = LOG_DIR / f"soak-worker-{secrets.token_hex(4)}.log"
    with open(log, "wb") as errors:
        return await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "benchmarks.soak_worker",
            target,
            str(key),
            TASK_TYPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=errors,
            env={**os.environ, "OPS_LOG_JSON": "true"},
            start_new_session=True,
        )


async def _read_starts(worker: asyncio.subprocess.Process, tally: Tally) -> None:
    assert worker.stdout is not None
    while line := await worker.stdout.readline():
        parts = line.decode().split()
        if len(parts) == 4 and parts[0] == "start":
            tally.counts["attempt started"] += 1
            if parts[2] == "1":
                tally.started(parts[1], float(parts[3]))


async def _stop_worker(worker: asyncio.subprocess.Process) -> None:
    if worker.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(worker.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(worker.wait(), 15)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(worker.pid, signal.SIGKILL)
            await worker.wait()


async def _drain(url: str, seconds: float) -> None:
    """Until no operation is left unfinished, or ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        conn = mariadb_connect(url, autocommit=True)
        try:
            with conn.cursor() as cursor:
                cursor.execute(
                    "SELECT COUNT(*) FROM user_operations WHERE state NOT IN (%s, %s, %s)",
                    TERMINAL,
                )
                found = cursor.fetchone()
        finally:
            conn.close()
        if found is None or int(found[0]) == 0:
            return
        await asyncio.sleep(2.0)


async def _soak(
    url: str,
    minutes: int,
    load: Load,
    stack_children: Mapping[str, Any],
    target: str,
    gateway: str,
    say: Callable[[str], None],
) -> tuple[list[str], list[Minute], Audit]:
    run_id = secrets.token_hex(3)
    tally = Tally()
    stop = asyncio.Event()
    worker = await _worker_process(target, private_key_path(keys_dir(), Role.WORKER.value))
    reader = asyncio.create_task(_read_starts(worker, tally))
    pids = _pids(stack_children, gateway, worker.pid)
    processes = list(pids)
    soak = Soak(target, gateway, load, run_id, tally, stop)
    for owner in soak.owners:
        grant_ai(url, owner)
    series: list[Minute] = []
    loop = asyncio.get_running_loop()
    cpu_pids = {**pids, "soak-load": os.getpid()}
    try:
        loops = soak.loops()
        started = loop.time()
        cpu_before = _cpu_seconds(cpu_pids)
        for minute in range(1, minutes + 1):
            await asyncio.sleep(max(0.0, started + minute * MINUTE_SECONDS - loop.time()))
            grpc_s, http_s, pickup_s, counts = tally.take_minute()
            cpu_now = _cpu_seconds(cpu_pids)
            cpu = {
                n: round(100 * (cpu_now[n] - cpu_before[n]) / MINUTE_SECONDS, 1)
                for n in cpu_now
                if n in cpu_before
            }
            cpu_before = cpu_now
            rss = {n: v for n, p in pids.items() if (v := rss_kib(p)) is not None}
            fds = {n: v for n, p in pids.items() if (v := open_fds(p)) is not None}
            threads, by_user, ours = await asyncio.to_thread(database_connections, url)
            row = Minute(
                minute=minute,
                ended_at=datetime.now(UTC).isoformat(timespec="seconds"),
                rss_kib=rss,
                fds={n: v for n, v in fds.items() if n in rss},
                create_grpc=Latency.of(grpc_s),
                create_http=Latency.of(http_s),
                pickup=Latency.of(pickup_s),
                db_threads_connected=threads,
                db_by_user=by_user,
                db_ours=ours,
                counts=counts,
                cpu_percent=cpu,
                db_held=database_sockets(pids, make_url(url).port or 3306),
                load=machine.load(),
            )
            series.append(row)
            say(row_text(row, processes, header=minute == 1))
        stop.set()
        await asyncio.gather(*loops, return_exceptions=True)
        await _drain(url, load.drain_seconds)
        died = {
            label: child.process.poll()
            for label, child in stack_children.items()
            if child.process.poll() is not None
        }
        if worker.returncode is not None:
            died["sdk-worker"] = worker.returncode
        if rss_kib(gateway_pid(gateway)) is None:  # gone, or a zombie (no VmRSS)
            died["gateway"] = None
        states, notified = await asyncio.to_thread(audit_database, url, tally.acknowledged)
        audit = judge(states, notified, tally.acknowledged, tally.repeat_mismatches, died)
    finally:
        stop.set()
        await soak.close()
        await _stop_worker(worker)
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
    return processes, series, audit


@contextlib.contextmanager
def _database(url: str | None) -> Iterator[str]:
    """``url``'s database migrated to the head, or a fresh one that is dropped after."""
    if url is None:
        with mariadb_database() as fresh:
            yield fresh
    else:
        migrate.upgrade(url)
        yield url


def run_soak(
    minutes: int,
    load: Load | None = None,
    say: Callable[[str], None] = print,
    database_url: str | None = None,
) -> SoakRun:
    """The whole soak on a MariaDB database (``database_url``, empty, or a fresh one):
    start, load, drain, audit, stop."""
    load = load or Load()
    if minutes < 1:
        raise ValueError("a soak runs at least one minute")
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    env = {
        "OPS_DEV_MODEL_SECONDS": str(load.model_seconds),
        "OPS_AI_USER_LIMIT": "4",
        "OPS_WORKER_CONCURRENCY": "2",
    }
    with (
        _database(database_url) as url,
        ai_stack(url, replicas=2, env=env) as stack,
        gateway_server(stack.replicas[0], env=stack.targets()) as gateway,
    ):
        say(
            f"soak: {minutes} min on MariaDB, {len(stack.children) + 2} processes,"
            f" {load.grpc_creates_per_second:g} gRPC + {load.http_creates_per_second:g} HTTP"
            f" creates/s over {load.owners} owners; logs in {LOG_DIR}"
        )
        processes, series, audit = asyncio.run(
            _soak(url, minutes, load, stack.children, stack.target, gateway, say)
        )
    return SoakRun(minutes, load, processes, series, audit, started_at, machine.describe())


# ---- output -------------------------------------------------------------------------------


def to_json(run: SoakRun) -> dict[str, Any]:
    def clean(value: Any) -> Any:  # NaN is not JSON
        if isinstance(value, float) and math.isnan(value):
            return None
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value

    cleaned: dict[str, Any] = clean(
        {
            "minutes": run.minutes,
            "started_at": run.started_at,
            "machine": run.machine,
            "load": asdict(run.load),
            "processes": run.processes,
            "series": [asdict(row) for row in run.series],
            "audit": asdict(run.audit),
        }
    )
    return cleaned


def plot(run: SoakRun, path: Path) -> None:
    """RSS of every process, open fds, and the p99s, minute by minute."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    minutes = [row.minute for row in run.series]
    figure, (rss, fds, p99) = plt.subplots(3, 1, figsize=(10, 11), sharex=True)
    for name in run.processes:
        rss_mib = [row.rss_kib.get(name, math.nan) / 1024 for row in run.series]
        rss.plot(minutes, rss_mib, marker=".", label=name)
        fds.plot(minutes, [row.fds.get(name, math.nan) for row in run.series], marker=".")
    fds.plot(
        minutes,
        [row.db_ours for row in run.series],
        "k--",
        marker=".",
        label="database connections (the run's schema)",
    )
    for label, attribute in (
        ("gRPC create", "create_grpc"),
        ("HTTP create", "create_http"),
        ("pickup", "pickup"),
    ):
        values = [latency_of(row, attribute) for row in run.series]
        p99.plot(minutes, values, marker=".", label=label)
    for axes in (rss, fds, p99):
        if len(run.series) >= MIN_MINUTES_FOR_TARGETS:
            axes.axvspan(BASELINE_MINUTES[0] - 0.5, BASELINE_MINUTES[-1] + 0.5, alpha=0.08)
            axes.axvspan(minutes[-END_MINUTES] - 0.5, minutes[-1] + 0.5, alpha=0.08, color="C1")
        axes.grid(alpha=0.3)
    rss.set_ylabel("RSS (MiB)")
    fds.set_ylabel("open fds")
    fds.legend(fontsize=7)
    p99.set_ylabel("p99 (ms)")
    p99.set_xlabel("minute of load (shaded: the baseline, minutes 4-6, and the last 3)")
    rss.legend(fontsize=7, ncol=3)
    p99.legend(fontsize=8)
    rss.set_title(
        f"durable-ops soak, {run.minutes} min on MariaDB, {run.started_at}"
        f" ({run.load.grpc_creates_per_second:g} gRPC + {run.load.http_creates_per_second:g}"
        " HTTP creates/s)"
    )
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)


def rows(run: SoakRun) -> list[Row]:
    """The verdicts and the audit, as rows of the benchmarks' table."""
    audit = run.audit
    counts = [
        ("acknowledged creates missing from the database", len(audit.lost)),
        ("repeated creates answered with another operation", len(audit.repeat_mismatches)),
        ("operations without one notification per terminal state", len(audit.notifications_wrong)),
        ("processes that died", len(audit.died)),
    ]
    found = [
        Row("13", figure, str(value), "", float(value), Target("==", 0)) for figure, value in counts
    ]
    found.append(
        Row(
            "15",
            f"operations not terminal {run.load.drain_seconds:.0f} s after the load stopped",
            str(len(audit.not_terminal)),
            "",
            float(len(audit.not_terminal)),
            None,
            f"{audit.acknowledged:,} acknowledged creates; outcomes {audit.outcomes}",
        )
    )
    return verdict_rows(run.series, run.processes) + found


def write_results(lines: Sequence[str], table: Sequence[Row]) -> None:
    """Put the run's figures between this module's markers of ``benchmarks/RESULTS.md``
    (the soak's section is added at the end the first time)."""
    from benchmarks.table import render_markdown

    block = "\n".join(
        [
            BEGIN_MARK,
            "",
            *(f"    {line}" for line in lines),
            "",
            "![soak: RSS, open fds and p99 a minute](soak.png)",
            "",
            render_markdown(table),
            END_MARK,
        ]
    )
    text = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n"
    if BEGIN_MARK in text and END_MARK in text:
        before, _, rest = text.partition(BEGIN_MARK)
        _, _, after = rest.partition(END_MARK)
        text = before + block + after
    else:
        section = [SECTION_BEGIN, "", "## Soak (figure 13, issue 40)", "", block, SECTION_END]
        text = text.rstrip() + "\n\n" + "\n".join(section) + "\n"
    RESULTS.write_text(text)


def header(run: SoakRun) -> list[str]:
    loads = [row.load for row in run.series]
    cpus = [sum(row.cpu_percent.values()) for row in run.series]
    return [
        f"soak, {run.minutes} min of steady load from {run.started_at}, {len(run.processes)}"
        " processes on MariaDB",
        f"machine: {run.machine}",
        f"load average during the run: median {median(loads):.2f}, max {max(loads):.2f};"
        f" the soak's own processes (services, workers, load generator) used a median"
        f" {median(cpus):.0f} % of one core a minute (the machine has {os.cpu_count()} cores)"
        if loads
        else "load average: none recorded",
        f"offered load: {run.load.grpc_creates_per_second:g} gRPC creates/s,"
        f" {run.load.http_creates_per_second:g} HTTP creates/s, {run.load.long_polls}"
        f" long-polls and {run.load.owners} event streams held, "
        f"{run.load.notification_reads_per_second:g} notification reads/s",
    ]


def run(ctx: Context) -> list[Row]:
    """Section 15 of ``python -m benchmarks``: the soak of ``ctx.soak_minutes``."""
    ctx.begin_section(f"15 soak ({ctx.soak_minutes} min, MariaDB, every service a process)")
    found = run_soak(ctx.soak_minutes, say=ctx.say)
    # A quick run's curve is not one to keep beside RESULTS.md: it goes to a temporary folder.
    folder = Path(tempfile.mkdtemp(prefix="durable-ops-soak-")) if ctx.quick else HERE
    save(found, folder / "soak.json", folder / "soak.png", ctx.say)
    return rows(found)


def save(found: SoakRun, json_path: Path, png_path: Path, say: Callable[[str], None]) -> None:
    json_path.write_text(json.dumps(to_json(found), indent=1) + "\n")
    plot(found, png_path)
    say(f"wrote {json_path} and {png_path}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.soak",
        description="N minutes of steady mixed load; RSS, fds, p99s and connections a minute.",
    )
    parser.add_argument("--minutes", type=int, default=30, help="minutes of load (default 30)")
    parser.add_argument(
        "--out", type=Path, default=HERE, help="folder for soak.json and soak.png (benchmarks/)"
    )
    parser.add_argument(
        "--results", action="store_true", help="write the soak's section of benchmarks/RESULTS.md"
    )
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.minutes < 1:
        parser.error("--minutes must be at least 1")
    from benchmarks.__main__ import _quiet_logs

    _quiet_logs()

    def say(line: str) -> None:
        print(line, flush=True)

    found = run_soak(args.minutes, say=say)
    args.out.mkdir(parents=True, exist_ok=True)
    save(found, args.out / "soak.json", args.out / "soak.png", say)
    table = rows(found)
    lines = header(found)
    print(render_text(lines, table))
    if args.results:
        write_results(lines, table)
        say(f"wrote {RESULTS}")
    return 1 if any(row.target == Target("==", 0) and not row.met for row in table) else 0


if __name__ == "__main__":
    sys.exit(main())
