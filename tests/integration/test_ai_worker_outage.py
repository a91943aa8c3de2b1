"""A model-server outage does not use up an analysis's attempts, on both engines.

The local model refuses connections. An analysis with nowhere else to go (no
fallback) asks again within its attempt until the refusals open the circuit, then
waits for the circuit to half-open and runs as its trial (``inference.router``):
before, each attempt failed ``model_connection_error`` at once, and a lone analysis
spent its three attempts in about 26 s, before the default circuit (3 failures) ever
opened. The real AI worker handler runs against the real Operations service; the
breaker is the default one on the real clock, with a cooldown of a few seconds
standing for the 30 s default.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog.testing
from sqlalchemy import select

from durable_ops.ai_worker.inference import InferenceError, InferenceRequest, ModelClient, Router
from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.model.circuit import CircuitBreaker, CircuitState
from durable_ops.model.routing import Route
from durable_ops.model.states import Privacy
from durable_ops.settings import Settings
from durable_ops.storage.schema import AnswerDraft, OperationAttempt
from tests.integration.test_ai_worker_executor import Workspace, executor_on
from tests.support.ai_stack import ModelServer
from tests.support.ai_worker import Journal, drain
from tests.support.clock import ManualClock
from tests.support.dev_model import serving
from tests.support.grpc_services import Services, running_services
from tests.support.operations_client import ALICE, OpsClient
from tests.support.ports import free_port, unanswered_port
from tests.support.stored import rows

LEASE_SECONDS = 5
COOLDOWN_SECONDS = 3.0
ASK_AGAIN_SECONDS = 0.3  # standing for the 1 s default
FAILURES_TO_OPEN = Settings().ai_circuit_failures
ANSWER_SECONDS = 2.0  # the dev model's pace: an answer streams over this long


@pytest.fixture
def services(db_url: str) -> Iterator[Services]:
    with running_services(db_url, ManualClock()) as running:
        yield running


def _attempts(services: Services, operation_id: str) -> list[tuple[str | None, ...]]:
    found = rows(
        services.db,
        select(OperationAttempt)
        .where(OperationAttempt.operation_id == operation_id)
        .order_by(OperationAttempt.attempt),
    )
    return [(row.outcome, row.failure_code) for row in found]


def _analysis(ops: OpsClient) -> str:
    request = ops.create_request(
        "outage", task_type="strategy.snapshot", max_attempts=3, retry_delay_seconds=5
    )
    request.privacy = pb.PRIVACY_LOCAL_ONLY  # nowhere else to go: no fallback
    return str(ops.create_raw(ALICE, request).operation.id)


def _router(port: int, breaker: CircuitBreaker, timeout_seconds: float = 10) -> Router:
    local = ModelClient(
        f"http://127.0.0.1:{port}/v1",
        "dev-heuristic",
        route=Route.LOCAL,
        timeout_seconds=timeout_seconds,
    )
    return Router(local, breaker, ask_again_seconds=ASK_AGAIN_SECONDS)


def test_one_attempt_rides_out_a_model_restart(services: Services) -> None:
    ops = OpsClient(services)
    port = free_port()  # nothing listens yet: every connection is refused
    operation_id = _analysis(ops)
    breaker = CircuitBreaker(FAILURES_TO_OPEN, COOLDOWN_SECONDS)
    servers: list[ModelServer] = []

    async def scenario() -> float:
        async with executor_on(_router(port, breaker), Workspace(), Journal(), 10) as executor:
            started = time.monotonic()
            attempt = asyncio.create_task(drain(services, executor, LEASE_SECONDS))
            while breaker.state(time.monotonic()) is not CircuitState.OPEN:
                assert not attempt.done()  # asking again, not failed
                await asyncio.sleep(0.05)
            assert not attempt.done()  # waiting for the circuit, not failed
            servers.append(await asyncio.to_thread(ModelServer, port=port))  # it is back
            await asyncio.wait_for(attempt, COOLDOWN_SECONDS + 10)
            return time.monotonic() - started

    try:
        took = asyncio.run(scenario())
    finally:
        for server in servers:
            server.stop()

    row = ops.row(operation_id)
    assert (row.state, row.attempt) == ("succeeded", 1)
    assert _attempts(services, operation_id) == [("succeeded", None)]
    (server,) = servers
    assert server.completions == 1  # the half-open trial, once the circuit let it go
    assert took >= COOLDOWN_SECONDS  # the open circuit spared the model meanwhile
    assert breaker.state(time.monotonic()) is CircuitState.CLOSED


def test_an_attempt_ends_once_the_models_trial_fails_too(services: Services) -> None:
    """...and says so in one line with its code: the model being down is understood, so no
    stack trace per attempt (``worker_handler_raised``) buries the log of an outage."""
    ops = OpsClient(services)
    operation_id = _analysis(ops)
    breaker = CircuitBreaker(FAILURES_TO_OPEN, COOLDOWN_SECONDS)
    router = _router(free_port(), breaker)  # nothing ever listens there

    async def scenario() -> float:
        async with executor_on(router, Workspace(), Journal(), 10) as executor:
            started = time.monotonic()
            await asyncio.wait_for(drain(services, executor, LEASE_SECONDS), 30)
            return time.monotonic() - started

    with structlog.testing.capture_logs() as lines:
        took = asyncio.run(scenario())
    row = ops.row(operation_id)
    assert (row.state, row.attempt) == ("waiting_for_retry", 1)
    assert _attempts(services, operation_id) == [("failed_retryable", "model_connection_error")]
    said = {line["event"]: line for line in lines}
    assert "worker_handler_raised" not in said
    assert (said["worker_attempt_failed"]["code"], said["worker_attempt_failed"]["retryable"]) == (
        "model_connection_error",
        True,
    )
    assert breaker.state(time.monotonic()) is CircuitState.OPEN  # the trial reopened it
    assert COOLDOWN_SECONDS <= took < router.circuit_wait_seconds


def test_a_model_host_that_never_answers_is_an_outage_not_the_models_silence(
    services: Services,
) -> None:
    """The model's host is off: connects hang rather than being refused. Each is given up
    within the connect bound and asked again as a refused one is, the failures open the
    circuit and the attempt ends as against a refusing model, once its trial failed too,
    ``model_connection_error``. Before, the first connect was waited for as long as the
    model may be silent (the task timeout, 120 s by default) and the attempt failed
    ``model_timeout``, with one failure counted by the breaker: every attempt alike."""
    ops = OpsClient(services)
    operation_id = _analysis(ops)
    breaker = CircuitBreaker(FAILURES_TO_OPEN, COOLDOWN_SECONDS)
    # A short bound on silence, so the connect bound (at most half of it) is short too.
    router = _router(unanswered_port(), breaker, timeout_seconds=1.0)

    async def scenario() -> None:
        async with executor_on(router, Workspace(), Journal(), 10) as executor:
            await asyncio.wait_for(drain(services, executor, LEASE_SECONDS), 30)

    asyncio.run(scenario())
    row = ops.row(operation_id)
    assert (row.state, row.attempt) == ("waiting_for_retry", 1)
    assert _attempts(services, operation_id) == [("failed_retryable", "model_connection_error")]
    assert breaker.state(time.monotonic()) is CircuitState.OPEN  # the trial reopened it


def _dev_model(port: int, cwd: Path) -> subprocess.Popen[bytes]:
    """``opsctl serve dev-model`` on ``port`` (a process to kill), once it answers."""
    env = {
        **os.environ,
        "OPS_DEV_MODEL_BIND": f"127.0.0.1:{port}",
        "OPS_DEV_MODEL_SECONDS": str(ANSWER_SECONDS),
    }
    command = [sys.executable, "-m", "durable_ops.cli", "serve", "dev-model"]
    process = subprocess.Popen(command, env=env, cwd=cwd)  # its var/ is not the checkout's
    serving(process, port)
    return process


def _draft(services: Services, operation_id: str) -> str:
    found = rows(
        services.db, select(AnswerDraft.body).where(AnswerDraft.operation_id == operation_id)
    )
    return str(found[0][0]) if found else ""


def test_one_attempt_rides_out_a_model_killed_mid_answer(
    services: Services, tmp_path: Path
) -> None:
    """Killed while it streams an answer the owner already sees, and started again on
    its port: the dropped request is sent again, and the first attempt succeeds (before,
    it failed ``model_connection_error`` at once: the model had taken the request)."""
    ops = OpsClient(services)
    port = free_port()
    operation_id = _analysis(ops)
    breaker = CircuitBreaker(FAILURES_TO_OPEN, COOLDOWN_SECONDS)
    killed_model = _dev_model(port, tmp_path)
    back: list[ModelServer] = []

    async def scenario() -> float:
        async with executor_on(_router(port, breaker), Workspace(), Journal(), 10) as executor:
            attempt = asyncio.create_task(drain(services, executor, LEASE_SECONDS))
            while not await asyncio.to_thread(_draft, services, operation_id):
                assert not attempt.done()
                await asyncio.sleep(0.05)  # until the answer streams to its owner
            killed = time.monotonic()
            killed_model.kill()  # mid-answer, no goodbye: its connections drop
            killed_model.wait()
            # Back on its port at once, in this process: a new process's start-up, slow on
            # a loaded machine, raced the circuit's cooldown and failed the trial.
            back.append(
                await asyncio.to_thread(ModelServer, port=port, delay_seconds=ANSWER_SECONDS)
            )
            await asyncio.wait_for(attempt, COOLDOWN_SECONDS + 2 * ANSWER_SECONDS + 5)
            return time.monotonic() - killed

    try:
        took = asyncio.run(scenario())
    finally:
        killed_model.kill()
        killed_model.wait()
        for server in back:
            server.stop()

    row = ops.row(operation_id)
    assert (row.state, row.attempt) == ("succeeded", 1)
    assert _attempts(services, operation_id) == [("succeeded", None)]
    assert took >= ANSWER_SECONDS  # the answer was streamed again from its start


def test_the_log_says_when_the_local_model_goes_down_and_comes_back() -> None:
    """With the model down an operator found, per attempt, ``local_circuit_wait`` (how long,
    not what for) and ``worker_handler_raised`` with a stack trace, and nothing naming the
    model's address or saying it was back. One line when the refusals open the circuit
    (which model, where, why), one when it answers again; none per call between."""
    port = free_port()  # nothing listens yet
    router = Router(
        ModelClient(f"http://127.0.0.1:{port}/v1", "dev-heuristic", route=Route.LOCAL),
        CircuitBreaker(1, 0.0),  # open at the first refusal, each next call its trial
        ask_again_seconds=0.0,
    )
    probe = InferenceRequest("probe", {"type": "object"}, [{"role": "user", "content": "hi"}])

    async def ask() -> None:
        with contextlib.suppress(InferenceError):  # down, or an answer the probe's own
            await router.infer(probe, Privacy.LOCAL_ONLY, task_external_allowed=False)

    async def scenario() -> None:
        await ask()  # refused, asked again as the trial, refused: the attempt ends
        await ask()  # still down: no second line
        server = await asyncio.to_thread(ModelServer, port=port)  # it is back
        try:
            await ask()
            await ask()
        finally:
            server.stop()
            await router.aclose()

    with structlog.testing.capture_logs() as lines:
        asyncio.run(scenario())
    said = [line for line in lines if line["event"].startswith("local_model_")]
    assert [line["event"] for line in said] == ["local_model_unavailable", "local_model_recovered"]
    down, back = said
    assert down["url"] == back["url"] == f"http://127.0.0.1:{port}/v1/chat/completions"
    assert (down["model"], down["code"], down["log_level"]) == (
        "dev-heuristic",
        "model_connection_error",
        "warning",
    )
    assert down["why"] == "cannot reach the model (ConnectError)"


def test_the_wait_for_the_circuit_is_not_cut_off_by_the_task_timeout(services: Services) -> None:
    """The attempt's own bound is the task timeout plus the router's circuit wait: with a
    task timeout (1 s) shorter than the cooldown (3 s), the attempt still waits for the
    circuit and runs as its trial, rather than failing ``task_timeout`` meanwhile."""
    ops = OpsClient(services)
    port = free_port()
    operation_id = _analysis(ops)
    breaker = CircuitBreaker(FAILURES_TO_OPEN, COOLDOWN_SECONDS)
    servers: list[ModelServer] = []

    async def scenario() -> None:
        async with executor_on(_router(port, breaker), Workspace(), Journal(), 1) as executor:
            attempt = asyncio.create_task(drain(services, executor, LEASE_SECONDS))
            while breaker.state(time.monotonic()) is not CircuitState.OPEN:
                await asyncio.sleep(0.05)
            servers.append(await asyncio.to_thread(ModelServer, port=port))
            await asyncio.wait_for(attempt, COOLDOWN_SECONDS + 10)

    try:
        asyncio.run(scenario())
    finally:
        for server in servers:
            server.stop()
    assert _attempts(services, operation_id) == [("succeeded", None)]
