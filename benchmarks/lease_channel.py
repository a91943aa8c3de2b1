"""Figure 8: the live lease channel, as absolute latencies and a query rate.

Unlike the other sections these are not ratios: each figure is a latency or a
rate against an absolute target.

1. Cancel → cancelled while an inference runs, with two Operations replicas.
   Real processes on MariaDB (``benchmarks.processes.ai_stack``): two
   ``opsctl serve operations`` behind one round-robin target, Notifications,
   Workspace, AI Admission, the development model streaming each answer over
   ``MODEL_SECONDS``, and one AI worker with the default 60-s lease (so a
   regular beat, every 20 s, cannot carry the cancel). Each sample admits a
   strategy snapshot of a fresh job, waits until the row is ``running`` with
   progress > 0 (the model request is in flight), reads from the replicas'
   ``lease_stream_opened`` log lines which one holds the worker's heartbeat
   stream, pauses a random fraction of a second (a cancel at any moment, not
   in step with the progress beat and so with the cancel watch's tick), and
   cancels through that replica or the other one, in turn. The latency runs
   from the start of ``CancelOperation`` until the row reads ``cancelled`` in
   the database (polled every ``ROW_POLL_SECONDS``); each operation must end
   with exactly one notification. Two warm-up cancels are not counted.
2. Create → claimed with an idle worker, on the same stack: the benchmark's
   own waiting claim (``ClaimOperation`` with ``wait``, as the AI worker
   issues it) sits on replica 1; the latency runs from the start of
   ``CreateOperation`` until the claim's answer arrives, the create sent to
   replica 1 (it wakes the claim at once) or to replica 2 (the claim is found
   by replica 1's shared poll).
3. The cost of the cancel poll: the database statements of one Operations
   replica (its servicer, cancel watch, claim poll and sweeper, built as
   ``durable_ops.operations.main`` builds them, in this process, counted by
   engine events) over a quiet window with ``STREAMS`` open heartbeat streams
   (600-s leases, one beat each) minus the same window with none.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import secrets
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from benchmarks import machine
from benchmarks.client import Claimed, OpsClient
from benchmarks.context import Context
from benchmarks.databases import mariadb_connect, mariadb_database
from benchmarks.processes import AiStack, ai_stack, caller, trusted
from benchmarks.stats import median, percentile
from benchmarks.table import Row, Target
from durable_ops.api.ai_admission.v1 import ai_admission_pb2 as apb
from durable_ops.api.ai_admission.v1 import ai_admission_pb2_grpc as apb_grpc
from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.api.operations.v1 import operations_pb2_grpc as pb_grpc
from durable_ops.api.workspace.v1 import workspace_pb2 as wpb
from durable_ops.api.workspace.v1 import workspace_pb2_grpc as wpb_grpc
from durable_ops.clock import utc_now
from durable_ops.model.scope import Role
from durable_ops.operations.app import OperationsApp
from durable_ops.operations.service import SERVICE_NAME, OperationsService
from durable_ops.operations.sweeper import run_sweeper
from durable_ops.operations.tuning import TUNING
from durable_ops.operations.watch import CANCEL
from durable_ops.rpc.open_calls import OpenCalls
from durable_ops.rpc.server import build_server, start, stop
from durable_ops.settings import Settings
from durable_ops.storage.db import Database
from durable_ops.up import grant_ai

CANCEL_P95 = Target("<=", 1.0)  # seconds
PICKUP_P50 = Target("<=", 50.0)  # milliseconds
POLL_RATE = Target("<=", 5.0)  # statements per second per replica

MODEL_SECONDS = 30  # the inference is still running when the cancel lands
# The product's defaults, pinned whatever this shell exports, so the notes say what ran.
DEFAULTS = Settings()
OWNER = "bench-lease-owner"
STRATEGY = "strategy.snapshot"
JOB = {
    "title": "Senior Data Engineer",
    "company": "Globex Analytics",
    "description": (
        "We are hiring a data engineer. Requirements: Python, Spark, Airflow, Kafka, SQL "
        "and dbt. You will build Spark pipelines and Airflow DAGs in Python."
    ),
}
ROW_POLL_SECONDS = 0.005
RUNNING_TIMEOUT_SECONDS = 30.0
CANCELLED_TIMEOUT_SECONDS = 10.0  # a sample that times out counts as this long
WARMUP_CANCELS = 2  # one through each path, not counted: fresh connections and code paths
# Random pause before each cancel: four ticks of the watch (Tuning.watch_interval_seconds).
CANCEL_PHASE_SECONDS = 4 * TUNING.watch_interval_seconds

STACK_ENV = {
    "OPS_DEV_MODEL_SECONDS": str(MODEL_SECONDS),
    "OPS_WORKER_LEASE_SECONDS": str(DEFAULTS.worker_lease_seconds),
    "OPS_WORKER_CONCURRENCY": str(DEFAULTS.worker_concurrency),
}

PICKUP_TASK = "bench.pickup"
CLAIM_WAIT_SECONDS = 10.0  # the AI worker's

STREAMS = 200
STREAM_LEASE_SECONDS = 600  # no beat but the first within the window
HELD_TASK = "bench.held"
WINDOW_SECONDS = 10.0


def run(ctx: Context) -> list[Row]:
    ctx.begin_section("8 live lease channel (2 Operations replicas, AI worker, MariaDB)")
    rows: list[Row] = []
    with (
        mariadb_database() as url,
        ai_stack(url, env=STACK_ENV) as stack,
    ):
        rows += cancel_rows(measure_cancels(ctx, url, stack, ctx.pick(10, 20)))
        rows += pickup_rows(asyncio.run(measure_pickups(ctx, stack, ctx.pick(10, 25))))
    # Statement counts do not depend on the load: no wait for a quiet machine here.
    load = machine.load()
    ctx.loads["8 live lease channel (cancel poll cost)"] = load
    ctx.say(f"== 8 live lease channel (cancel poll cost, MariaDB) (load {load:.2f}, not waited)")
    with mariadb_database() as url:
        rows += poll_rows(asyncio.run(measure_poll_cost(ctx, url)))
    return rows


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def _spread(values: Sequence[float]) -> str:
    return f"p50 {_ms(median(values))}, p95 {_ms(percentile(values, 95))}, max {_ms(max(values))}"


# ---- 1: cancel → cancelled ----------------------------------------------------------------


@dataclass(frozen=True)
class CancelSample:
    seconds: float
    holder: bool | None  # cancelled through the replica holding the stream (None: unknown)
    notifications: int
    timed_out: bool


def _wait_row(
    conn: Any,
    operation_id: str,
    done: Callable[[str, int], bool],
    *,
    timeout: float,
    interval: float = ROW_POLL_SECONDS,
) -> bool:
    """Poll the row (autocommit: every read is fresh) until ``done(state, progress)``."""
    deadline = time.perf_counter() + timeout
    with conn.cursor() as cursor:
        while True:
            cursor.execute(
                "SELECT state, progress_percent FROM user_operations WHERE id = %s",
                (operation_id,),
            )
            found = cursor.fetchone()
            if found is not None and done(found[0], int(found[1])):
                return True
            if time.perf_counter() > deadline:
                return False
            time.sleep(interval)


def _notifications(conn: Any, operation_id: str) -> int:
    with conn.cursor() as cursor:
        cursor.execute(
            "SELECT COUNT(*) FROM user_notifications WHERE operation_id = %s", (operation_id,)
        )
        found = cursor.fetchone()
        return int(found[0]) if found else 0


def _holder(stack: AiStack, operation_id: str, timeout: float = 2.0) -> int | None:
    """Which replica (index) logged the opening of the operation's heartbeat stream."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for index in range(len(stack.replicas)):
            events = stack.events(f"operations-{index + 1}", "lease_stream_opened")
            if any(e.get("operation_id") == operation_id for e in events):
                return index
        time.sleep(0.05)
    return None


class _Canceller:
    """Admits, waits for the inference and cancels, one sample at a time (blocking stubs)."""

    def __init__(self, url: str, stack: AiStack) -> None:
        self._stack = stack
        self._metadata = caller(Role.GATEWAY).metadata(OWNER)
        self._channels = [grpc.insecure_channel(address) for address in stack.replicas]
        self.replicas = [pb_grpc.OperationsServiceStub(channel) for channel in self._channels]
        self._channels += [grpc.insecure_channel(a) for a in (stack.workspace, stack.admission)]
        self._jobs = wpb_grpc.WorkspaceServiceStub(self._channels[-2])
        self._admission = apb_grpc.AiAdmissionServiceStub(self._channels[-1])
        self._conn = mariadb_connect(url, autocommit=True)

    def close(self) -> None:
        self._conn.close()
        for channel in self._channels:
            channel.close()

    def sample(self, via_holder: bool) -> CancelSample:
        metadata, conn = self._metadata, self._conn
        job = self._jobs.CreateJob(wpb.CreateJobRequest(**JOB), metadata=metadata).id
        admitted = self._admission.Admit(
            apb.AdmitRequest(task_type=STRATEGY, subject_id=job), metadata=metadata
        )
        operation_id = admitted.operation.id
        if not _wait_row(
            conn,
            operation_id,
            lambda state, progress: state == "running" and progress > 0,
            timeout=RUNNING_TIMEOUT_SECONDS,
            interval=0.02,
        ):
            raise RuntimeError(f"{operation_id} was not running with progress in time")
        holder = _holder(self._stack, operation_id)
        # The owner cancels at any moment: without this pause every cancel would land
        # just after the cancel watch's tick, which the progress beat falls in phase with.
        time.sleep(random.uniform(0.0, CANCEL_PHASE_SECONDS))
        if holder is None:
            through = random.randrange(len(self.replicas))
        else:
            through = holder if via_holder else (holder + 1) % len(self.replicas)
        started = time.perf_counter()
        asked = self.replicas[through].CancelOperation(
            pb.CancelOperationRequest(operation_id=operation_id), metadata=metadata
        )
        if not asked.cancel_requested or asked.state != pb.OPERATION_STATE_RUNNING:
            raise RuntimeError(f"{operation_id}: the cancel answered {asked}")
        ended = _wait_row(
            conn,
            operation_id,
            lambda state, _progress: state == "cancelled",
            timeout=CANCELLED_TIMEOUT_SECONDS,
        )
        seconds = time.perf_counter() - started if ended else CANCELLED_TIMEOUT_SECONDS
        notes = _notifications(conn, operation_id)
        if notes != 1:  # the notification is written with the state; look once more
            time.sleep(0.5)
            notes = _notifications(conn, operation_id)
        return CancelSample(
            seconds, None if holder is None else through == holder, notes, not ended
        )


def _where(sample: CancelSample) -> str:
    return {None: "an unknown replica", True: "holder", False: "other"}[sample.holder]


@dataclass(frozen=True)
class CancelRun:
    samples: list[CancelSample]
    warmup: list[CancelSample]


def measure_cancels(ctx: Context, url: str, stack: AiStack, samples: int) -> CancelRun:
    """``WARMUP_CANCELS`` uncounted cancels (one through each path), then ``samples``."""
    grant_ai(url, OWNER)
    canceller = _Canceller(url, stack)
    try:
        warmup = [canceller.sample(via_holder=index % 2 == 0) for index in range(WARMUP_CANCELS)]
        ctx.say(
            "  warm-up cancels: " + ", ".join(f"{_ms(s.seconds)} via {_where(s)}" for s in warmup)
        )
        found: list[CancelSample] = []
        for index in range(samples):
            found.append(canceller.sample(via_holder=index % 2 == 0))
            ctx.say(
                f"  cancel {index + 1}/{samples} via {_where(found[-1])}: {_ms(found[-1].seconds)}"
            )
    finally:
        canceller.close()
    return CancelRun(found, warmup)


def cancel_rows(run: CancelRun) -> list[Row]:
    samples = run.samples
    seconds = [s.seconds for s in samples]
    paths = []
    for label, holder in (("via the holder", True), ("via the other replica", False)):
        chosen = [s.seconds for s in samples if s.holder is holder]
        if chosen:
            paths.append(f"{label} ({len(chosen)}): {_spread(chosen)}")
    unknown = sum(s.holder is None for s in samples)
    if unknown:
        paths.append(f"{unknown} of unknown holder")
    timeouts = sum(s.timed_out for s in samples)
    every = [*run.warmup, *samples]
    one_note = sum(s.notifications == 1 for s in every)
    subject = f"{len(samples)} cancels, half via each replica"
    setup = (
        f"2 Operations replicas, AI worker lease {DEFAULTS.worker_lease_seconds} s, dev model"
        f" {MODEL_SECONDS} s per answer;"
        " cancel sent at a random moment up to"
        f" {CANCEL_PHASE_SECONDS:g} s after the row is running with progress > 0, timed"
        f" until the row reads cancelled (polled every {ROW_POLL_SECONDS * 1000:g} ms)"
    )
    return [
        Row(
            "8",
            "cancel → cancelled during an inference, p50",
            subject,
            "",
            median(seconds),
            note=f"{setup}; " + "; ".join(paths) + f"; {timeouts} timed out; warm-up (not"
            " counted): " + ", ".join(f"{_ms(s.seconds)} via {_where(s)}" for s in run.warmup),
            unit="s",
        ),
        Row(
            "8",
            "cancel → cancelled during an inference, p95",
            subject,
            "",
            percentile(seconds, 95),
            CANCEL_P95,
            unit="s",
        ),
        Row(
            "8",
            "cancelled operations with exactly one notification",
            f"{one_note} of {len(every)} (warm-up included)",
            "",
            one_note / len(every),
            Target("==", 1),
        ),
    ]


# ---- 2: create → claimed ------------------------------------------------------------------


async def _timed_claim(client: OpsClient) -> tuple[Claimed | None, float]:
    claimed = await client.claim_waiting(PICKUP_TASK, CLAIM_WAIT_SECONDS)
    return claimed, time.perf_counter()


async def measure_pickups(ctx: Context, stack: AiStack, samples: int) -> dict[str, list[float]]:
    """Create → claimed seconds, by where the create went: ``same`` or ``other`` replica."""
    claimer = OpsClient(stack.replicas[0])
    producers = {"same": claimer, "other": OpsClient(stack.replicas[1])}
    found: dict[str, list[float]] = {"same": [], "other": []}
    run_id = secrets.token_hex(4)
    try:
        for index in range(2 * samples):
            where = "same" if index % 2 == 0 else "other"
            claim = asyncio.create_task(_timed_claim(claimer))
            # The claim is registered and waiting; the shared poll's phase is random.
            await asyncio.sleep(random.uniform(0.15, 0.35))
            if claim.done():
                raise RuntimeError(f"the waiting claim answered early: {claim.result()}")
            started = time.perf_counter()
            created = await producers[where].create(OWNER, f"{run_id}-{index}", PICKUP_TASK)
            claimed, at = await asyncio.wait_for(claim, CLAIM_WAIT_SECONDS + 5)
            if claimed is None or claimed.operation_id != created.id:
                raise RuntimeError(f"the waiting claim took {claimed}, not {created.id}")
            found[where].append(at - started)
            await claimer.complete(claimed)
        ctx.say(f"  pickup same replica {_spread(found['same'])}")
        ctx.say(f"  pickup other replica {_spread(found['other'])}")
    finally:
        for client in producers.values():
            await client.close()
    return found


def pickup_rows(found: dict[str, list[float]]) -> list[Row]:
    interval = TUNING.claim_poll_interval_seconds
    rows = []
    for where, figure in (
        ("same", "create → claimed, idle waiting claim, create on its replica, p50"),
        ("other", "create → claimed, idle waiting claim, create on the other replica, p50"),
    ):
        values = found[where]
        rows.append(
            Row(
                "8",
                figure,
                f"{len(values)} creates",
                "",
                median(values) * 1000,
                PICKUP_P50,
                f"waiting claim (ClaimOperation wait {CLAIM_WAIT_SECONDS:g} s, as the AI worker's)"
                f" on replica 1, create on replica {1 if where == 'same' else 2}: {_spread(values)}"
                + (
                    ""
                    if where == "same"
                    else f"; the claim's replica polls every {interval * 1000:g} ms"
                    f" (Tuning.claim_poll_interval_seconds), on average {interval * 500:g} ms"
                    " after the commit"
                ),
                unit="ms",
            )
        )
    return rows


# ---- 3: what the cancel poll costs the database ----------------------------------------------


@dataclass
class Window:
    seconds: float
    statements: Counter[str] = field(default_factory=Counter)
    commits: int = 0
    rollbacks: int = 0

    @property
    def total(self) -> int:
        return sum(self.statements.values())

    @property
    def rate(self) -> float:
        return self.total / self.seconds

    @property
    def round_trips(self) -> float:
        return (self.total + self.commits + self.rollbacks) / self.seconds


class _StatementCounter:
    """Every statement, COMMIT and ROLLBACK the engine sends while a window is open."""

    def __init__(self, db: Database) -> None:
        self._window: Window | None = None
        db.listen("before_cursor_execute", self._execute)
        db.listen("commit", self._commit)
        db.listen("rollback", self._rollback)

    def _execute(
        self, _conn: Any, _cursor: Any, statement: str, _params: Any, _ctx: Any, _many: bool
    ) -> None:
        if self._window is not None:
            self._window.statements[_kind(statement)] += 1

    def _commit(self, _conn: Any) -> None:
        if self._window is not None:
            self._window.commits += 1

    def _rollback(self, _conn: Any) -> None:
        if self._window is not None:
            self._window.rollbacks += 1

    async def window(self, seconds: float) -> Window:
        self._window = Window(seconds)
        started = time.perf_counter()
        try:
            await asyncio.sleep(seconds)
        finally:
            window, self._window = self._window, None
        window.seconds = time.perf_counter() - started
        return window


def _kind(statement: str) -> str:
    """A statement's verb and table, for the breakdown in the note."""
    words = statement.split()
    verb = words[0].upper() if words else "?"
    lowered = [word.lower().strip("`") for word in words]
    for keyword in ("from", "update", "into"):
        if keyword in lowered[:-1]:
            table = lowered[lowered.index(keyword) + 1]
            extra = (
                " cancel_requested" if "cancel_requested" in statement.split("WHERE")[-1] else ""
            )
            return f"{verb} {table}{extra}"
    return verb


class _Streams:
    """``count`` claimed operations, each holding an open Heartbeat stream after one beat."""

    def __init__(self, target: str) -> None:
        self._client = OpsClient(target)
        self._calls: list[grpc.aio.StreamStreamCall[pb.HeartbeatRequest, pb.HeartbeatResponse]] = []

    async def open(self, count: int) -> None:
        run_id = secrets.token_hex(4)
        client = self._client
        await asyncio.gather(
            *(
                client.create(f"bench-held-{i % 20}", f"{run_id}-{i}", HELD_TASK)
                for i in range(count)
            )
        )
        held = []
        for _ in range(count):
            claimed = await client.claim(HELD_TASK, STREAM_LEASE_SECONDS)
            if claimed is None:
                raise RuntimeError("a held operation could not be claimed")
            held.append(claimed)

        async def first_beat(claimed: Claimed) -> None:
            call = client.heartbeat_stream(claimed)
            self._calls.append(call)
            await call.write(client.beat(claimed, STREAM_LEASE_SECONDS))
            reply = await call.read()
            if not isinstance(reply, pb.HeartbeatResponse):
                raise RuntimeError("a heartbeat stream ended at its first beat")

        await asyncio.gather(*(first_beat(claimed) for claimed in held))

    async def close(self) -> None:
        for call in self._calls:
            call.cancel()
        await self._client.close()


@dataclass(frozen=True)
class PollCost:
    idle: Window
    loaded: Window
    watch_polls: int  # the cancel watch's own count of polls in the loaded window
    interval: float


async def measure_poll_cost(ctx: Context, url: str) -> PollCost:
    """One replica as ``opsctl serve operations`` builds it, in this process, counted."""
    db = Database(url, pool_size=16)
    counter = _StatementCounter(db)
    app = OperationsApp(db, utc_now)
    server, port = build_server(
        "127.0.0.1:0",
        lambda s: pb_grpc.add_OperationsServiceServicer_to_server(
            OperationsService(app, OpenCalls()), s
        ),
        [SERVICE_NAME],
        trusted=trusted(),
    )
    await start(server)
    sweeper = asyncio.create_task(run_sweeper(db, utc_now, TUNING.sweep_interval_seconds))
    streams = _Streams(f"127.0.0.1:{port}")
    try:
        await asyncio.sleep(1.0)
        ctx.say(f"  counting statements for {WINDOW_SECONDS:g} s with no stream open")
        idle = await counter.window(WINDOW_SECONDS)
        await streams.open(STREAMS)
        await asyncio.sleep(1.0)
        ctx.say(f"  counting statements for {WINDOW_SECONDS:g} s with {STREAMS} streams open")
        polls = app.watch.polls
        loaded = await counter.window(WINDOW_SECONDS)
        polls = app.watch.polls - polls
    finally:
        await streams.close()
        sweeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sweeper
        await stop(server, 0.5)
        await app.close()
        db.dispose()
    return PollCost(idle, loaded, polls, TUNING.watch_interval_seconds * CANCEL.every_ticks)


def _breakdown(window: Window) -> str:
    return ", ".join(
        f"{kind} {count / window.seconds:.1f}/s" for kind, count in window.statements.most_common()
    )


def poll_rows(cost: PollCost) -> list[Row]:
    added = cost.loaded.rate - cost.idle.rate
    return [
        Row(
            "8",
            f"DB statements/s one replica adds for {STREAMS} open heartbeat streams",
            f"{cost.loaded.rate:.1f}/s ({cost.loaded.round_trips:.1f} round trips/s)",
            f"{cost.idle.rate:.1f}/s ({cost.idle.round_trips:.1f} round trips/s)",
            added,
            POLL_RATE,
            f"{WINDOW_SECONDS:g}-s windows, one beat per stream (lease {STREAM_LEASE_SECONDS} s),"
            f" cancel watch every {cost.interval:g} s: {cost.watch_polls} polls in the window;"
            f" with streams: {_breakdown(cost.loaded)}; without: {_breakdown(cost.idle)};"
            " round trips add the COMMIT of every transaction",
            unit="/s",
        )
    ]
