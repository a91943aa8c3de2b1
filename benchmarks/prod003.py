"""Figure 13: PROD-003, the local-model concurrency benchmark (issue 36 point 1, ADR 0044).

What a queue of analyses costs on the local model, end to end as a user meets
it, for each AI worker concurrency (``OPS_WORKER_CONCURRENCY``) 1, 2 and 4
against each llama-server slot count (``--parallel``) 1, 2 and 4: nine cells,
each on a fresh stack (``benchmarks.processes.ai_stack``, one Operations
process, the services, the AI worker; a gateway in front) on a fresh MariaDB
database and a fresh model server, with a relay (``benchmarks.token_tap``)
between the worker and the model that keeps the server's own ``timings`` and
``usage`` of every answer.

Per cell, one owner (Pro plan, AI on; a daily token budget and the per-user and
global admission limits far above the queue, so admission is never what
waits) creates ``ANALYSES`` / 2 job postings and as many CVs through the
gateway (``POST /api/jobs``, ``POST /api/attachments``) with its event stream
(``GET /api/events``) open, then clicks every analysis at once: a strategy
snapshot of each posting (its CV as context) and a CV review of each CV (its
posting as context), each a ``POST`` to the task's resource. Then it waits for
every operation's terminal event and reads each result
(``GET /api/operations/{id}/result``: the validated note). Per cell:

* analyses a minute: succeeded analyses over the wall time from the first
  click to the last result;
* p50/p95 click → result: from each POST's start to its terminal event;
* p50/p95 time to first token: from each POST's start to its first draft event
  with text (what the page shows first; it includes the worker's wait for its
  next beat with news, ``NEWS_BEAT_SECONDS``);
* the server's tokens a second: the mean of llama-server's own
  ``timings.predicted_per_second`` over its answers (each answer's speed), and
  its ``usage.completion_tokens`` summed over the cell's wall time (the
  server's total output);
* failures: analyses that did not succeed with a note, in time;

each figure as a ratio to concurrency 1 on 1 slot in the same run, and the
machine: its cores, the load at each cell's start, the CPU steal over each
cell (``/proc/stat``). Then the decision rule (``model.concurrency.decide``)
reads the cells and says the default.

Full mode needs ``scripts/real-model.sh build`` (it never builds here): the
real model, Gemma 3 270M on llama-server started per cell with ``--parallel P``
and ``--ctx-size`` 4096 x P (each slot gets the context one slot has by
default: llama.cpp divides the context among the slots), ``ANALYSES_FULL``
analyses a cell. Quick mode runs three cells (concurrency 1, 2 and 4 on one
nominal slot) of ``ANALYSES_QUICK`` analyses on the development model (which
has no slots: it answers every request at once), to check the path, not to
decide anything.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx

from benchmarks import machine
from benchmarks.context import Context
from benchmarks.databases import mariadb_database
from benchmarks.processes import (
    JWT_SECRET,
    ai_stack,
    free_port,
    gateway_server,
    llama_server,
    real_model_paths,
)
from benchmarks.stats import median, percentile
from benchmarks.table import Row
from benchmarks.token_tap import Completion, TokenTap
from durable_ops.clock import utc_now
from durable_ops.gateway.auth import mint_user_token
from durable_ops.model.concurrency import Cell, Decision, decide
from durable_ops.model.tasks import CV_REVIEW, STRATEGY_SNAPSHOT
from durable_ops.storage import budgets as budget_store
from durable_ops.storage.migrate import open_migrated
from durable_ops.up import grant_ai

SECTION = "13"
OWNER = "bench-prod003"
CONCURRENCIES = (1, 2, 4)
SLOTS = (1, 2, 4)
ANALYSES_FULL = 20  # at least 20 (issue 36): 10 strategy snapshots and 10 CV reviews
ANALYSES_QUICK = 4
DEV_MODEL_SECONDS = 1.0  # quick mode: each development-model answer streams over this
CTX_PER_SLOT = 4096  # scripts/real-model.sh's --ctx-size for its one slot
# Far above any queue here: admission must not be what the queue waits on.
ADMISSION_LIMITS = {"OPS_AI_USER_LIMIT": "1000", "OPS_AI_GLOBAL_LIMIT": "1000"}
DAILY_TOKENS = 100_000_000
# The longest one answer may take (a queued one waits for the others first): the worker's
# own per-inference timeout is the product's default (120 s), which a cell may meet.
ANSWER_SECONDS_FULL = 120.0
ANSWER_SECONDS_QUICK = 20.0
TERMINAL = {"succeeded", "failed", "cancelled"}
BASELINE = (1, 1)

JOB = {
    "company": "Globex Analytics",
    "description": (
        "We are hiring a data engineer. Requirements: Python, Spark, Airflow, Kafka, SQL "
        "and dbt. You will build Spark pipelines and Airflow DAGs in Python, mentor two "
        "analysts and own the warehouse's data quality checks."
    ),
}
CV_TEXT = """Jane Doe
jane@example.com

## Experience
- Built Spark and Kafka pipelines processing 2TB per day in Python
- Cut Airflow DAG runtime by 45% through SQL and dbt model tuning
- Led a team of 4 engineers

## Education
MSc Computer Science

## Skills
Python, SQL, Spark, Kafka
"""


def run(ctx: Context) -> list[Row]:
    ctx.begin_section("13 local-model concurrency, PROD-003 (worker concurrency x model slots)")
    found = measure(ctx)
    return rows(ctx, found)


@dataclass
class Analysis:
    task_type: str
    clicked: float  # perf_counter before its POST
    operation_id: str = ""
    refused: str = ""  # the POST's status and body when it was not 202
    first_text: float | None = None  # its first draft event with text
    ended: float | None = None  # its terminal event
    state: str = ""
    noted: bool = False  # GET .../result answered its note


@dataclass
class CellRun:
    concurrency: int
    slots: int
    analyses: list[Analysis]
    completions: list[Completion]
    wall: float  # first click → last terminal event (or the cell's timeout)
    load: float  # the 1-minute load at the cell's start
    steal: float  # the hypervisor's share of the CPUs over the cell
    model: str

    @property
    def succeeded(self) -> list[Analysis]:
        return [a for a in self.analyses if a.state == "succeeded" and a.noted]

    @property
    def failures(self) -> int:
        return len(self.analyses) - len(self.succeeded)

    @property
    def per_minute(self) -> float:
        return 60 * len(self.succeeded) / self.wall if self.wall > 0 else 0.0

    def click_to_result(self) -> list[float]:
        return [a.ended - a.clicked for a in self.succeeded if a.ended is not None]

    def to_first_text(self) -> list[float]:
        return [a.first_text - a.clicked for a in self.succeeded if a.first_text is not None]

    def predicted_per_second(self) -> list[float]:
        return [speed for c in self.completions if (speed := answer_speed(c)) is not None]

    def completion_tokens(self) -> int:
        return sum(int(c.usage.get("completion_tokens", 0)) for c in self.completions if c.usage)

    def cell(self) -> Cell:
        tail = self.click_to_result()
        return Cell(
            self.concurrency,
            self.slots,
            len(self.analyses),
            self.failures,
            self.per_minute,
            percentile(tail, 95) if tail else float("inf"),
        )


def answer_speed(completion: Completion) -> float | None:
    """The server's own tokens a second for one answer: llama-server's
    ``timings.predicted_per_second``, else (the development model) ``predicted_n`` over
    ``predicted_ms``; None when the server sent no timings."""
    timings = completion.timings or {}
    speed = timings.get("predicted_per_second")
    if isinstance(speed, int | float) and not isinstance(speed, bool):
        return float(speed)
    count, ms = timings.get("predicted_n"), timings.get("predicted_ms")
    if isinstance(count, int | float) and isinstance(ms, int | float) and ms > 0:
        return 1000 * float(count) / float(ms)
    return None


@dataclass
class Found:
    cells: list[CellRun] = field(default_factory=list)
    model: str = ""
    threads: str = ""


def plan(quick: bool) -> list[tuple[int, int]]:
    """The cells, (concurrency, slots), baseline first."""
    if quick:
        return [(concurrency, 1) for concurrency in CONCURRENCIES]
    return [(concurrency, slots) for slots in SLOTS for concurrency in CONCURRENCIES]


def measure(
    ctx: Context, cells: Sequence[tuple[int, int]] | None = None, analyses: int | None = None
) -> Found:
    """The cells (default: ``plan``), each of ``analyses`` (default: the mode's)."""
    found = Found()
    if not ctx.quick and real_model_paths() is None:
        raise RuntimeError("full mode needs the real model: run scripts/real-model.sh build")
    analyses = analyses or ctx.pick(ANALYSES_QUICK, ANALYSES_FULL)
    for concurrency, slots in cells or plan(ctx.quick):
        ctx.say(f"  cell: worker concurrency {concurrency}, {slots} slot(s), {analyses} analyses")
        run_ = asyncio.run(_cell(ctx, concurrency, slots, analyses))
        found.cells.append(run_)
        found.model = run_.model
        ctx.say(f"    {summary(run_)}")
    found.threads = os.environ.get("OPS_LLAMA_THREADS", "cores - 1 (scripts/real-model.sh)")
    return found


def summary(cell: CellRun) -> str:
    tail, first = cell.click_to_result(), cell.to_first_text()
    speed = cell.predicted_per_second()
    return (
        f"{cell.per_minute:.2f} analyses/min, click → result {_p(tail)}, first text"
        f" {_p(first)}, {median(speed) if speed else float('nan'):.1f} tok/s per answer,"
        f" {cell.completion_tokens() / cell.wall if cell.wall else 0:.1f} tok/s total,"
        f" {cell.failures} failed, load {cell.load:.2f}, steal {cell.steal:.0%}"
    )


def _p(values: Sequence[float]) -> str:
    if not values:
        return "n/a"
    return f"p50 {median(values):.1f} s / p95 {percentile(values, 95):.1f} s"


# ---- one cell ----------------------------------------------------------------------------


async def _cell(ctx: Context, concurrency: int, slots: int, analyses: int) -> CellRun:
    with mariadb_database() as url, _model_server(ctx.quick, slots) as (model_port, model):
        _entitle(url)
        async with TokenTap("127.0.0.1", model_port) as tap:
            env = {
                **ADMISSION_LIMITS,
                "OPS_AI_LOCAL_URL": f"http://127.0.0.1:{tap.port}/v1",
                "OPS_AI_LOCAL_MODEL": model,
                "OPS_WORKER_CONCURRENCY": str(concurrency),
            }
            if ctx.quick:  # the stack's development model is the model behind the tap
                env["OPS_DEV_MODEL_BIND"] = f"127.0.0.1:{model_port}"
                env["OPS_DEV_MODEL_SECONDS"] = str(DEV_MODEL_SECONDS)
            # Starting the processes blocks this loop; nothing is relayed until they are up.
            with (
                ai_stack(url, replicas=1, env=env) as stack,
                gateway_server(stack.replicas[0], env=stack.targets()) as gateway,
            ):
                user = _User(gateway)
                try:
                    await user.open()
                    subjects = await user.subjects(analyses // 2)
                    load, before = machine.load(), machine.cpu_times()
                    per_answer = ANSWER_SECONDS_QUICK if ctx.quick else ANSWER_SECONDS_FULL
                    queue, wall = await user.click_all(subjects, timeout=per_answer * analyses)
                    after = machine.cpu_times()
                    await user.read_results(queue)
                finally:
                    await user.close()
    steal = machine.steal_share(before, after) if before and after else 0.0
    return CellRun(concurrency, slots, queue, list(tap.completions), wall, load, steal, model)


def _entitle(url: str) -> None:
    """The owner: Pro plan with AI on, and a daily token budget no queue here reaches
    (what ``opsctl users set-budget`` stores)."""
    grant_ai(url, OWNER)
    db = open_migrated(url, pool_size=1)
    try:
        db.run(
            lambda tx: budget_store.set_override(
                tx, DAILY_TOKENS, set_by="benchmark", now=utc_now()
            ),
            owner_id=OWNER,
        )
    finally:
        db.dispose()


@contextmanager
def _model_server(quick: bool, slots: int) -> Iterator[tuple[int, str]]:
    """The model's port and name: in quick mode a port for the stack's development model
    (it starts with the stack), else a fresh llama-server with ``slots`` slots."""
    port = free_port()
    if quick:
        yield port, "dev-heuristic"
        return
    paths = real_model_paths()
    assert paths is not None
    with llama_server(port, "--parallel", str(slots), "--ctx-size", str(CTX_PER_SLOT * slots)):
        props = httpx.get(f"http://127.0.0.1:{port}/props", timeout=5).json()
        if props.get("total_slots") != slots:
            raise RuntimeError(f"llama-server has {props.get('total_slots')} slots, not {slots}")
        yield port, paths["MODEL"]


@dataclass(frozen=True)
class Subjects:
    jobs: list[str]
    cvs: list[str]


class _User:
    """One owner's browser: the gateway's HTTP API with its event stream open."""

    def __init__(self, gateway: str) -> None:
        token = mint_user_token(JWT_SECRET, OWNER, 4 * 3600)
        self._http = httpx.AsyncClient(
            base_url=gateway,
            headers={"Authorization": f"Bearer {token}"},
            # No read timeout on the stream, quiet between events as a page's is.
            timeout=httpx.Timeout(30, read=None),
            limits=httpx.Limits(max_connections=200, max_keepalive_connections=200),
        )
        self._reader: asyncio.Task[None] | None = None
        self._opened = asyncio.Event()
        self._by_operation: dict[str, Analysis] = {}
        self._early: dict[str, list[tuple[float, dict[str, Any]]]] = {}
        self._changed = asyncio.Event()

    async def open(self) -> None:
        self._reader = asyncio.create_task(self._read())
        async with asyncio.timeout(30):
            await self._opened.wait()

    async def _read(self) -> None:
        async with self._http.stream("GET", "/api/events") as response:
            response.raise_for_status()
            self._opened.set()
            name = ""
            async for line in response.aiter_lines():
                if line.startswith("event: "):
                    name = line.removeprefix("event: ")
                elif line.startswith("data: ") and name == "operation":
                    self._take(time.perf_counter(), json.loads(line.removeprefix("data: ")))

    def _take(self, at: float, event: dict[str, Any]) -> None:
        operation_id = event["operation"]["id"]
        analysis = self._by_operation.get(operation_id)
        if analysis is None:  # its event came before its POST's answer
            self._early.setdefault(operation_id, []).append((at, event))
            return
        _apply(analysis, at, event)
        self._changed.set()

    async def subjects(self, pairs: int) -> Subjects:
        jobs, cvs = [], []
        for index in range(pairs):
            job = await self._http.post(
                "/api/jobs", json={**JOB, "title": f"Data Engineer {index}"}
            )
            cv = await self._http.post(
                "/api/attachments",
                json={"kind": "cv", "filename": f"cv-{index}.txt", "text": CV_TEXT},
            )
            jobs.append(job.raise_for_status().json()["id"])
            cvs.append(cv.raise_for_status().json()["id"])
        return Subjects(jobs, cvs)

    async def click_all(
        self, subjects: Subjects, *, timeout: float
    ) -> tuple[list[Analysis], float]:
        """Every analysis clicked at once; back when each ended (or at ``timeout``), with
        the wall time from the first click to the last end."""
        requests: list[tuple[Analysis, str, dict[str, str]]] = []
        for job, cv in zip(subjects.jobs, subjects.cvs, strict=True):
            requests.append(
                (
                    Analysis(STRATEGY_SNAPSHOT.name, 0.0),
                    _path(STRATEGY_SNAPSHOT.path, job),
                    {"attachment_id": cv},
                )
            )
            requests.append(
                (Analysis(CV_REVIEW.name, 0.0), _path(CV_REVIEW.path, cv), {"job_id": job})
            )
        started = time.perf_counter()
        await asyncio.gather(*(self._click(*request) for request in requests))
        queue = [analysis for analysis, _, _ in requests]
        deadline = started + timeout
        while any(a.operation_id and a.ended is None for a in queue):
            left = deadline - time.perf_counter()
            if left <= 0:
                break
            self._changed.clear()
            try:
                async with asyncio.timeout(min(left, 5.0)):
                    await self._changed.wait()
            except TimeoutError:
                pass
        ends = [a.ended for a in queue if a.ended is not None]
        return queue, (max(ends) if ends else time.perf_counter()) - started

    async def _click(self, analysis: Analysis, path: str, body: dict[str, str]) -> None:
        analysis.clicked = time.perf_counter()
        response = await self._http.post(path, json=body)
        if response.status_code != 202:
            analysis.refused = f"{response.status_code} {response.text[:200]}"
            return
        analysis.operation_id = response.json()["operation_id"]
        self._by_operation[analysis.operation_id] = analysis
        for at, event in self._early.pop(analysis.operation_id, []):
            _apply(analysis, at, event)

    async def read_results(self, queue: list[Analysis]) -> None:
        """Each succeeded analysis's result: its validated note, as the page reads it."""
        for analysis in queue:
            if analysis.state != "succeeded":
                continue
            result = await self._http.get(f"/api/operations/{analysis.operation_id}/result")
            analysis.noted = result.status_code == 200

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
        await self._http.aclose()


def _path(template: str, subject_id: str) -> str:
    return template.replace("{id}", subject_id)


def _apply(analysis: Analysis, at: float, event: dict[str, Any]) -> None:
    draft = event.get("draft")
    if analysis.first_text is None and isinstance(draft, dict) and _has_text(draft.get("partial")):
        analysis.first_text = at
    state = event["operation"]["state"]
    if state in TERMINAL and analysis.ended is None:
        analysis.ended, analysis.state = at, state
        if analysis.first_text is None and state == "succeeded":
            analysis.first_text = at  # no draft shown before the result: the result is first


def _has_text(partial: object) -> bool:
    if isinstance(partial, dict):
        return any(_has_text(value) for value in partial.values())
    if isinstance(partial, list):
        return any(_has_text(value) for value in partial)
    return partial is not None and partial != ""


# ---- the table ---------------------------------------------------------------------------


def _ratio(value: float, baseline: float) -> float:
    return value / baseline if baseline > 0 else float("nan")


def rows(ctx: Context, found: Found) -> list[Row]:
    by_cell = {(cell.concurrency, cell.slots): cell for cell in found.cells}
    base = by_cell.get(BASELINE)
    if base is None:
        raise RuntimeError("the baseline cell (concurrency 1, 1 slot) did not run")
    model = f"{found.model}" + (" (development model: no slots)" if ctx.quick else "")
    out: list[Row] = []
    for cell in found.cells:
        where = f"concurrency {cell.concurrency} x {cell.slots} slot(s)"
        baseline = "1 x 1" if cell is not base else "itself"
        tail, base_tail = cell.click_to_result(), base.click_to_result()
        first, base_first = cell.to_first_text(), base.to_first_text()
        speed, base_speed = cell.predicted_per_second(), base.predicted_per_second()
        total = cell.completion_tokens() / cell.wall if cell.wall else 0.0
        base_total = base.completion_tokens() / base.wall if base.wall else 0.0
        out += [
            Row(
                SECTION,
                f"analyses a minute, {where}",
                f"{cell.per_minute:.2f}/min, {len(cell.succeeded)} of {len(cell.analyses)}",
                baseline,
                _ratio(cell.per_minute, base.per_minute),
                note=(
                    f"{where}: {cell.failures} failed"
                    + (f" ({_failures(cell)})" if cell.failures else "")
                    + f"; wall {cell.wall:.0f} s; load {cell.load:.2f} at its start,"
                    f" steal {cell.steal:.0%} over it"
                ),
            ),
            Row(
                SECTION,
                f"click → result p95 (p50), {where}",
                _p(tail),
                baseline,
                _pair_ratio(tail, base_tail),
            ),
            Row(
                SECTION,
                f"click → first text p95 (p50), {where}",
                _p(first),
                baseline,
                _pair_ratio(first, base_first),
            ),
            Row(
                SECTION,
                f"server tokens/s per answer (total), {where}",
                f"{_median(speed):.1f} per answer, {total:.1f} total",
                baseline,
                _ratio(_median(speed), _median(base_speed)),
                note=(
                    f"{where}: total (completion tokens ÷ wall) {total:.1f} tok/s, ratio"
                    f" {_ratio(total, base_total):.2f}; per answer: llama-server's"
                    f" timings.predicted_per_second, median of {len(speed)}"
                ),
            ),
        ]
    out.append(decision_row(ctx, found, model))
    return out


def _failures(cell: CellRun) -> str:
    kinds: dict[str, int] = {}
    for analysis in cell.analyses:
        if analysis.state == "succeeded" and analysis.noted:
            continue
        kind = analysis.refused or analysis.state or "no end in time"
        if analysis.state == "succeeded":
            kind = "no result"
        kinds[kind] = kinds.get(kind, 0) + 1
    return ", ".join(f"{count} {kind}" for kind, count in kinds.items())


def _median(values: Sequence[float]) -> float:
    return median(values) if values else float("nan")


def _pair_ratio(values: Sequence[float], base: Sequence[float]) -> float:
    if not values or not base:
        return float("nan")
    return _ratio(percentile(values, 95), percentile(base, 95))


def decision_row(ctx: Context, found: Found, model: str) -> Row:
    decision: Decision | None = None
    try:
        decision = decide(cell.cell() for cell in found.cells)
        said = decision.reason
    except ValueError as refused:
        said = f"no decision: {refused}"
    value = float("nan") if decision is None else float(decision.concurrency)
    what = "n/a" if decision is None else f"{decision.outcome} ({decision.concurrency})"
    if decision is not None and decision.outcome == "follow_slots":
        what = f"follow the server's slots, up to {decision.bound}"
    return Row(
        SECTION,
        "default worker concurrency by the rule (model.concurrency.decide)",
        what + (" — quick mode decides nothing" if ctx.quick else ""),
        "",
        value,
        note=(
            f"the rule: {said}. Each cell ran once (a fresh stack and model server each),"
            f" not in interleaved rounds. Model {model}, llama-server threads {found.threads};"
            f" machine {machine.describe()}"
        ),
    )
