"""Figure 12: the live page (issue 39), as absolute latencies, a write rate and a CPU share.

Real processes on MariaDB (``benchmarks.processes.ai_stack``: two Operations
replicas behind the worker's round-robin target, and ``opsctl serve gateway``
whose target lists both, so a stream watches each): the development model streams each answer
over ``MODEL_SECONDS`` as llama-server does, the AI worker reads it and sends
the answer so far on its lease beats, the replica holding its lease stream
writes the draft and wakes the owner's watches there, the gateway turns the
change into an ``operation`` event of ``GET /api/events``, read by this process
as a page does. Each answer is counted by the replica that held its beats (the
``lease_stream_opened`` log line): replica 1 or replica 2; either pushes its
own commits to the stream's watch on it (before ADR 43, the gateway watched
replica 1 alone, which found replica 2's commits by its shared poll).

1. Token → page. A relay (``benchmarks.token_tap``) between the worker and
   the model stamps every chunk as it comes off the model server's socket.
   Each strategy snapshot (one at a time, of one owner, whose single stream is
   open throughout) is one answer; a token counts if it changes the text the
   page shows (the values of ``gateway.partial.fields_so_far`` of the answer up
   to it: a piece of a string, a number; not the quotes, colons and commas
   between fields), and its latency runs to the arrival of the first event
   whose ``partial`` shows it. Tokens whose text no draft event showed before the run ended (written
   after the last beat, shown by the result) are counted apart. The first
   answer warms up and is not counted. As info, each event's newest token to
   the event: the beat's own trip to the page, without its wait for the beat.
2. Draft writes per streaming operation: a trigger in the benchmark's own
   database counts the rows written to ``ai_answer_drafts`` per operation (one
   per beat that carried text), over the time from its first token to its last.
3. One gateway holding ``IDLE_OWNERS`` x ``IDLE_PER_OWNER`` idle streams (a
   process of their own, ``benchmarks.idle_streams``): the gateway's CPU from
   ``/proc/<pid>/stat`` over ``CPU_WINDOW_SECONDS`` with nothing else running
   (replica 1's and Notifications' as info), then figure 1 again while they
   stay open. The window spans a stream's keepalive period twice and its unread
   refresh once (``gateway.events``).
4. In full mode, when ``scripts/real-model.sh build`` has cached it, figure 1
   on a real model: llama.cpp's ``llama-server`` with Gemma 3 270M behind the
   relay instead of the development model (``REAL_ANSWERS`` answers, both
   replicas' paths together: too few for one row each). One stream per owner: the per-user bound
   (``OPS_GATEWAY_LONG_POLLS_PER_USER``, 16) is respected, and a thousand
   owners is the heavier case, since the Operations replica's shared poll reads
   every watched owner's newest change (a thousand tabs of fewer users would
   cost the gateway the same per stream).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import grpc
import httpx

from benchmarks import machine
from benchmarks.context import Context
from benchmarks.databases import mariadb_connect, mariadb_database
from benchmarks.processes import (
    JWT_SECRET,
    AiStack,
    ai_stack,
    caller,
    free_port,
    gateway_pid,
    gateway_server,
    llama_server,
    process_cpu_seconds,
    real_model_paths,
)
from benchmarks.stats import median, percentile
from benchmarks.table import Row, Target
from benchmarks.token_tap import Completion, TokenTap
from durable_ops.api.ai_admission.v1 import ai_admission_pb2 as apb
from durable_ops.api.ai_admission.v1 import ai_admission_pb2_grpc as apb_grpc
from durable_ops.api.workspace.v1 import workspace_pb2 as wpb
from durable_ops.api.workspace.v1 import workspace_pb2_grpc as wpb_grpc
from durable_ops.gateway.auth import mint_user_token
from durable_ops.gateway.partial import fields_so_far
from durable_ops.model.scope import Role
from durable_ops.up import grant_ai
from durable_ops.worker.lease import NEWS_BEAT_SECONDS

LATENCY_P95 = Target("<=", 250.0)  # milliseconds, token leaving the model → on the page
WRITES_PER_SECOND = Target("<=", 5.0)  # draft writes per streaming operation
GATEWAY_CPU = Target("<=", 5.0)  # percent of one core, 1,000 idle streams

OWNER = "bench-live"
STRATEGY = "strategy.snapshot"
JOB = {
    "title": "Senior Data Engineer",
    "company": "Globex Analytics",
    "description": (
        "We are hiring a data engineer. Requirements: Python, Spark, Airflow, Kafka, SQL "
        "and dbt. You will build Spark pipelines and Airflow DAGs in Python, mentor two "
        "analysts and own the warehouse's data quality checks."
    ),
}
MODEL_SECONDS = 6.0  # one answer's stream, first token to last
ANSWER_TIMEOUT_SECONDS = 60.0
WARMUP_ANSWERS = 1
IDLE_OWNERS = 1000
IDLE_PER_OWNER = 1
IDLE_OPEN_TIMEOUT_SECONDS = 180.0
IDLE_SETTLE_SECONDS = 5.0  # after the last stream opened, before the CPU window
CPU_WINDOW_SECONDS = 30.0
REPLICAS = ("replica 1", "replica 2")
TERMINAL = {"succeeded", "failed", "cancelled"}
REAL_ANSWERS = 3
REAL_ANSWER_TIMEOUT_SECONDS = 300.0  # one thread of a busy 2-core machine

_COUNT_ROW = (
    " ON ai_answer_drafts FOR EACH ROW INSERT INTO bench_draft_writes"
    " VALUES (NEW.operation_id, 1) ON DUPLICATE KEY UPDATE writes = writes + 1"
)
_COUNT_WRITES = [
    "CREATE TABLE bench_draft_writes (operation_id VARCHAR(64) PRIMARY KEY, writes INT NOT NULL)",
    "CREATE TRIGGER bench_draft_inserted AFTER INSERT" + _COUNT_ROW,
    "CREATE TRIGGER bench_draft_updated AFTER UPDATE" + _COUNT_ROW,
]


def run(ctx: Context) -> list[Row]:
    ctx.begin_section("12 live events (2 Operations replicas, AI worker, gateway, MariaDB)")
    with mariadb_database() as url:
        grant_ai(url, OWNER)
        _count_draft_writes(url)
        found = asyncio.run(_measure(ctx, url, ctx.pick(4, 16), ctx.pick(4, 8)))
        real = [] if ctx.quick else asyncio.run(_measure_real(ctx, url))
        writes = _draft_writes(url)
    loaded = f"{found.idle.streams:,} idle streams open besides"
    return [
        *(latency_rows(found.alone, "one stream open", holder) for holder in (0, 1)),
        beat_row(found.alone),
        write_row(found.alone + found.loaded + real, writes),
        cpu_row(found.idle),
        *(latency_rows(found.loaded, loaded, holder) for holder in (0, 1)),
        *([latency_rows(real, "real model, llama-server with Gemma 3 270M", None)] if real else []),
    ]


@dataclass
class Answer:
    """One operation's answer: its tokens as they left the model, its events as they came."""

    operation_id: str
    completion: Completion
    events: list[tuple[float, dict[str, Any]]]  # (arrival, partial) of each draft event
    holder: int | None  # the index of the replica that held the beats; None: unknown


@dataclass
class IdleCost:
    streams: int
    seconds: float
    cpu: dict[str, float]  # process → CPU seconds over the window
    load: float
    steal: float
    carried: list[int]  # over the window: keepalives, unread counts, bytes


@dataclass
class Found:
    alone: list[Answer] = field(default_factory=list)
    loaded: list[Answer] = field(default_factory=list)
    idle: IdleCost = field(default_factory=lambda: IdleCost(0, 0.0, {}, 0.0, 0.0, [0, 0, 0]))


def _count_draft_writes(url: str) -> None:
    conn = mariadb_connect(url, autocommit=True)
    try:
        with conn.cursor() as cursor:
            for statement in _COUNT_WRITES:
                cursor.execute(statement)
    finally:
        conn.close()


def _draft_writes(url: str) -> dict[str, int]:
    conn = mariadb_connect(url, autocommit=True)
    try:
        with conn.cursor() as cursor:
            cursor.execute("SELECT operation_id, writes FROM bench_draft_writes")
            return {str(operation): int(writes) for operation, writes in cursor.fetchall()}
    finally:
        conn.close()


async def _measure(ctx: Context, url: str, answers: int, loaded_answers: int) -> Found:
    model_port = free_port()
    async with TokenTap("127.0.0.1", model_port) as tap:
        env = {
            "OPS_DEV_MODEL_BIND": f"127.0.0.1:{model_port}",
            "OPS_AI_LOCAL_URL": f"http://127.0.0.1:{tap.port}/v1",
            "OPS_DEV_MODEL_SECONDS": str(MODEL_SECONDS),
        }
        # Starting the processes blocks this loop; nothing is relayed until they are up.
        with (
            ai_stack(url, replicas=2, env=env) as stack,
            gateway_server(_every_replica(stack), env=stack.targets()) as gateway,
        ):
            page = _Page(gateway, OWNER)
            admit = _Admitter(stack)
            try:
                await page.open()
                found = Found()
                found.alone = await _answers(ctx, stack, admit, page, tap, answers, "alone")
                idle = _spawn_idle(gateway)
                try:
                    found.idle = await _idle_cost(ctx, stack, gateway, idle)
                    found.loaded = await _answers(
                        ctx, stack, admit, page, tap, loaded_answers, "loaded"
                    )
                finally:
                    _stop(idle)
            finally:
                await page.close()
                await admit.close()
    return found


async def _measure_real(ctx: Context, url: str) -> list[Answer]:
    """Figure 1 with llama-server behind the relay; none when it is not built."""
    with _real_model() as served:
        if served is None:
            ctx.say("  no real model (scripts/real-model.sh build has not run): left out")
            return []
        port, name = served
        async with TokenTap("127.0.0.1", port) as tap:
            env = {
                "OPS_AI_LOCAL_URL": f"http://127.0.0.1:{tap.port}/v1",
                "OPS_AI_LOCAL_MODEL": name,
            }
            with (
                ai_stack(url, replicas=2, env=env) as stack,
                gateway_server(_every_replica(stack), env=stack.targets()) as gateway,
            ):
                page = _Page(gateway, OWNER)
                admit = _Admitter(stack)
                try:
                    await page.open()
                    return await _answers(
                        ctx,
                        stack,
                        admit,
                        page,
                        tap,
                        REAL_ANSWERS,
                        "real model",
                        timeout=REAL_ANSWER_TIMEOUT_SECONDS,
                    )
                finally:
                    await page.close()
                    await admit.close()


@contextmanager
def _real_model() -> Iterator[tuple[int, str] | None]:
    """``scripts/real-model.sh serve`` on a free port, if it is built (never builds here):
    its port and the model's name; None when it is not built."""
    paths = real_model_paths()
    if paths is None:
        yield None
        return
    port = free_port()
    with llama_server(port):
        yield port, paths["MODEL"]


class _Admitter:
    """Admits one strategy snapshot of a fresh job, as the page's "Analyse" does."""

    def __init__(self, stack: AiStack) -> None:
        self._metadata = caller(Role.GATEWAY).metadata(OWNER)
        self._channels = [grpc.aio.insecure_channel(a) for a in (stack.workspace, stack.admission)]
        self._jobs = wpb_grpc.WorkspaceServiceStub(self._channels[0])
        self._admission = apb_grpc.AiAdmissionServiceStub(self._channels[1])

    async def admit(self) -> str:
        job = await self._jobs.CreateJob(wpb.CreateJobRequest(**JOB), metadata=self._metadata)
        admitted = await self._admission.Admit(
            apb.AdmitRequest(task_type=STRATEGY, subject_id=job.id), metadata=self._metadata
        )
        operation_id: str = admitted.operation.id
        return operation_id

    async def close(self) -> None:
        for channel in self._channels:
            await channel.close()


class _Page:
    """One tab's ``GET /api/events``: every operation event, stamped as it arrives."""

    def __init__(self, gateway: str, owner: str) -> None:
        # No read timeout: the stream is quiet between answers, as a page's is.
        self._http = httpx.AsyncClient(base_url=gateway, timeout=httpx.Timeout(10, read=None))
        self._headers = {"Authorization": f"Bearer {mint_user_token(JWT_SECRET, owner, 3600)}"}
        self._reader: asyncio.Task[None] | None = None
        self._opened = asyncio.Event()
        self.drafts: dict[str, list[tuple[float, dict[str, Any]]]] = {}
        self._ended: dict[str, asyncio.Event] = {}

    async def open(self) -> None:
        self._reader = asyncio.create_task(self._read())
        async with asyncio.timeout(10):
            await self._opened.wait()

    def ended(self, operation_id: str) -> asyncio.Event:
        return self._ended.setdefault(operation_id, asyncio.Event())

    async def _read(self) -> None:
        async with self._http.stream("GET", "/api/events", headers=self._headers) as response:
            response.raise_for_status()
            self._opened.set()
            name = ""
            async for line in response.aiter_lines():
                if line.startswith("event: "):
                    name = line.removeprefix("event: ")
                elif line.startswith("data: ") and name == "operation":
                    self._take(time.perf_counter(), json.loads(line.removeprefix("data: ")))

    def _take(self, at: float, event: dict[str, Any]) -> None:
        operation = event["operation"]
        draft = event.get("draft")
        if isinstance(draft, dict) and draft.get("partial") is not None:
            self.drafts.setdefault(operation["id"], []).append((at, draft["partial"]))
        if operation["state"] in TERMINAL:
            self.ended(operation["id"]).set()

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
        await self._http.aclose()


async def _answers(
    ctx: Context,
    stack: AiStack,
    admit: _Admitter,
    page: _Page,
    tap: TokenTap,
    count: int,
    label: str,
    timeout: float = ANSWER_TIMEOUT_SECONDS,
) -> list[Answer]:
    """``count`` answers (after the warm-up ones), one at a time, each to its end; an
    operation that asked the model other than once (a real model's answer refused and
    tried again) is left out."""
    found: list[Answer] = []
    for index in range(WARMUP_ANSWERS + count):
        before = len(tap.completions)
        operation_id = await admit.admit()
        async with asyncio.timeout(timeout):
            await page.ended(operation_id).wait()
        if len(tap.completions) != before + 1:
            ctx.say(
                f"  {label}: {operation_id} asked {len(tap.completions) - before} times, left out"
            )
            continue
        answer = Answer(
            operation_id,
            tap.completions[-1],
            page.drafts.get(operation_id, []),
            _holder(stack, operation_id),
        )
        if index >= WARMUP_ANSWERS:
            found.append(answer)
            ms = [s * 1000 for s in token_latencies(answer).seconds]
            ctx.say(
                f"  {label} answer {index + 1 - WARMUP_ANSWERS}/{count}, beats on replica "
                f"{_replica(answer)}: "
                f"{len(answer.completion.tokens)} tokens, {len(answer.events)} draft events, "
                f"p50 {median(ms):.0f} ms, p95 {percentile(ms, 95):.0f} ms"
            )
    return found


def _every_replica(stack: AiStack) -> str:
    """The gateway's Operations target: every replica listed, so a stream watches each."""
    return "ipv4:" + ",".join(stack.replicas)


def _replica(answer: Answer) -> str:
    return "?" if answer.holder is None else str(answer.holder + 1)


def _holder(stack: AiStack, operation_id: str) -> int | None:
    """Which replica (index) logged the opening of the operation's lease stream."""
    for index in range(len(stack.replicas)):
        events = stack.events(f"operations-{index + 1}", "lease_stream_opened")
        if any(event.get("operation_id") == operation_id for event in events):
            return index
    return None


@dataclass
class TokenLatencies:
    seconds: list[float]  # of each shown token, to the first event showing it
    newest: list[float]  # of each event's newest token, to the event
    unshown: int  # tokens that changed the page but no draft event showed
    unmatched: int  # draft events whose partial is no prefix's (should be 0)


def _key(partial: object) -> str:
    return json.dumps(partial, sort_keys=True)


def _text(partial: object) -> list[str]:
    """The text a page renders of a partial answer: its values, without the empty ones."""
    if isinstance(partial, dict):
        return [text for value in partial.values() for text in _text(value)]
    if isinstance(partial, list):
        return [text for value in partial for text in _text(value)]
    return [] if partial is None or partial == "" else [str(partial)]


def token_latencies(answer: Answer) -> TokenLatencies:
    """Match each token that changes the text the page shows to the first event showing
    it (an event's partial is the answer's up to a token: the first such token)."""
    first_showing: dict[str, int] = {}  # a partial → the first token it is the partial of
    seen_texts: set[str] = set()
    changes: deque[int] = deque()
    for k, (_at, text) in enumerate(answer.completion.tokens):
        shown = fields_so_far(text)
        first_showing.setdefault(_key(shown), k)
        rendered = json.dumps(_text(shown))
        if rendered not in seen_texts:
            seen_texts.add(rendered)
            if _text(shown):
                changes.append(k)
    seconds: list[float] = []
    newest: list[float] = []
    unmatched = 0
    for arrived, partial in answer.events:
        upto = first_showing.get(_key(partial))
        if upto is None:
            unmatched += 1
            continue
        newest.append(arrived - answer.completion.tokens[upto][0])
        while changes and changes[0] <= upto:
            seconds.append(arrived - answer.completion.tokens[changes.popleft()][0])
    return TokenLatencies(seconds, newest, len(changes), unmatched)


def _spawn_idle(gateway: str) -> subprocess.Popen[str]:
    """The process holding the idle streams (``benchmarks.idle_streams``)."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "benchmarks.idle_streams",
            gateway,
            str(IDLE_OWNERS),
            str(IDLE_PER_OWNER),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "OPS_JWT_SECRET": JWT_SECRET},
    )


async def _idle_cost(
    ctx: Context, stack: AiStack, gateway: str, idle: subprocess.Popen[str]
) -> IdleCost:
    """Once the idle streams are open: the gateway's (and services') CPU over a quiet
    window."""
    streams = IDLE_OWNERS * IDLE_PER_OWNER
    ctx.say(f"  opening {streams:,} idle event streams ({IDLE_OWNERS:,} owners)")
    assert idle.stdout is not None
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(IDLE_OPEN_TIMEOUT_SECONDS):
        line = await loop.run_in_executor(None, idle.stdout.readline)
    if line.strip() != f"open {streams}":
        raise RuntimeError(f"the idle streams did not open: {line!r}")
    await asyncio.sleep(IDLE_SETTLE_SECONDS)
    window = CPU_WINDOW_SECONDS
    pids = {
        "gateway": gateway_pid(gateway),
        "operations": stack.children["operations-1"].process.pid,
        "notifications": stack.children["notifications"].process.pid,
    }
    ctx.say(f"  measuring CPU for {window:g} s")
    received = [await _received(idle)]
    before = {name: process_cpu_seconds(pid) for name, pid in pids.items()}
    times, started = machine.cpu_times(), time.perf_counter()
    await asyncio.sleep(window)
    seconds = time.perf_counter() - started
    after = {name: process_cpu_seconds(pid) for name, pid in pids.items()}
    ended = machine.cpu_times()
    received.append(await _received(idle))
    steal = machine.steal_share(times, ended) if times and ended else 0.0
    cpu = {name: after[name] - before[name] for name in pids}
    ctx.say(
        "  CPU over the window: "
        + ", ".join(f"{name} {100 * used / seconds:.1f} %" for name, used in cpu.items())
    )
    carried = [after - before for before, after in zip(*received, strict=True)]
    return IdleCost(streams, seconds, cpu, machine.load(), steal, carried)


async def _received(idle: subprocess.Popen[str]) -> tuple[int, int, int]:
    """What the idle streams have carried so far: keepalives, unread counts, bytes."""
    assert idle.stdin is not None
    assert idle.stdout is not None
    idle.stdin.write("\n")
    idle.stdin.flush()
    line = await asyncio.get_running_loop().run_in_executor(None, idle.stdout.readline)
    _, keepalives, _, unread, _, size, _ = line.split()
    return int(keepalives), int(unread), int(size)


def _stop(idle: subprocess.Popen[str]) -> None:
    """Close the idle streams: their process ends when its standard input does."""
    if idle.stdin is not None:
        with contextlib.suppress(BrokenPipeError):
            idle.stdin.close()
    try:
        idle.wait(30)
    except subprocess.TimeoutExpired:
        idle.kill()
        idle.wait()


def _ms(values: Sequence[float]) -> str:
    ms = [v * 1000 for v in values]
    return f"p50 {median(ms):.0f} ms, p95 {percentile(ms, 95):.0f} ms, max {max(ms):.0f} ms"


def latency_rows(answers: list[Answer], where: str, holder: int | None) -> Row:
    """Figure 1 of the answers whose beats ``holder`` held (None: all of them)."""
    chosen = [answer for answer in answers if holder is None or answer.holder == holder]
    matched = [token_latencies(answer) for answer in chosen]
    seconds = [s for found in matched for s in found.seconds]
    path = "either replica" if holder is None else REPLICAS[holder]
    figure = f"token leaving the model → its text on /api/events, p95 ({where}, beats on {path})"
    if not seconds:
        return Row("12", figure, "no answer took this path", "", float("nan"), LATENCY_P95)
    per_answer = ", ".join(
        f"{percentile([s * 1000 for s in found.seconds], 95):.0f}"
        + ("" if holder is not None else f" (replica {_replica(answer)})")
        for answer, found in zip(chosen, matched, strict=True)
        if found.seconds
    )
    unshown = sum(found.unshown for found in matched)
    unmatched = sum(found.unmatched for found in matched)
    return Row(
        "12",
        figure,
        _ms(seconds),
        "",
        percentile([s * 1000 for s in seconds], 95),
        LATENCY_P95,
        f"{where}, {'both replicas' if holder is None else f'replica {holder + 1}'}: "
        f"{len(seconds):,} tokens of {len(chosen)} answers; per answer p95 {per_answer} ms; "
        f"{unshown} tokens shown only by the result (after the last beat); {unmatched} "
        "events matched no text",
        "ms",
    )


def beat_row(answers: list[Answer]) -> Row:
    """Each event's newest token to the event: the trip after the wait for the beat."""
    parts: list[str] = []
    value = float("nan")
    for holder in (1, 0):
        newest = [
            s
            for answer in answers
            if answer.holder == holder
            for s in token_latencies(answer).newest
        ]
        if newest:
            parts.insert(0, f"replica {holder + 1}: {_ms(newest)}")
            value = percentile([s * 1000 for s in newest], 95)
    return Row(
        "12",
        "… of it, each event's newest token to the event, p95 (one stream open)",
        "; ".join(parts),
        "",
        value,
        None,
        f"the rest is the token's wait for the worker's next beat with news (at most "
        f"{NEWS_BEAT_SECONDS * 1000:.0f} ms)",
        "ms",
    )


def write_row(answers: list[Answer], writes: dict[str, int]) -> Row:
    rates, streaming = [], []
    for answer in answers:
        tokens = answer.completion.tokens
        streaming.append(tokens[-1][0] - tokens[0][0])
        rates.append(writes.get(answer.operation_id, 0) / streaming[-1])
    return Row(
        "12",
        "draft writes a second per streaming operation (the most of any)",
        f"median {median(rates):.2f}/s over {len(rates)} answers streaming "
        f"{min(streaming):.0f}-{max(streaming):.0f} s",
        "",
        max(rates),
        WRITES_PER_SECOND,
        f"the worker beats with news at most every {NEWS_BEAT_SECONDS:g} s; counted by a "
        "trigger on ai_answer_drafts in the benchmark's database",
        "/s",
    )


def cpu_row(idle: IdleCost) -> Row:
    share = {name: 100 * used / idle.seconds for name, used in idle.cpu.items()}
    return Row(
        "12",
        f"gateway CPU holding {idle.streams:,} idle event streams, % of one core",
        f"{share['gateway']:.1f} % over {idle.seconds:.0f} s",
        "",
        share["gateway"],
        GATEWAY_CPU,
        f"the same window: replica 1 {share['operations']:.1f} %, Notifications "
        f"{share['notifications']:.1f} %; the streams carried {idle.carried[0]:,} keepalives"
        f" and {idle.carried[1]:,} unread counts ({idle.carried[2]:,} bytes); load "
        f"{idle.load:.2f}, steal {idle.steal:.0%}",
        "%",
    )
