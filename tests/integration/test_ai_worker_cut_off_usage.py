"""An answer cut off partway still costs what the model produced, on both engines.

The owner's cancel, the task timeout and a model server lost mid-answer each end the
attempt before the answer is done; the tokens the model streamed until then were spent
all the same (ADR 38: "a failed attempt ... and an acknowledged cancel spent their
tokens too"). The real AI worker handler runs against the real Operations service and
admission's budget; the model is a loopback HTTP server streaming the start of an
answer and then stalling (cancel, timeout) or dropping the connection (a killed server).
It sends no ``usage`` (that comes last), so the worker counts the content chunks, and
the prompt the server had read by then as estimated from its text.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator

import pytest
from sqlalchemy import select
from starlette import routing
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse

from durable_ops.ai_worker.inference import ModelClient, Router
from durable_ops.model.budgets import prompt_tokens_of
from durable_ops.model.circuit import CircuitBreaker
from durable_ops.model.routing import Route
from durable_ops.storage.schema import OperationAttempt
from tests.integration.test_ai_worker_executor import Workspace, executor_on
from tests.integration.test_inference_client import chunk, serving, sse
from tests.integration.test_token_budgets import EXPECTED, NOON, ROOMY, _admit, _day
from tests.support.ai_worker import Journal, drain
from tests.support.clock import ManualClock
from tests.support.grpc_services import Services, running_services
from tests.support.operations_client import OpsClient
from tests.support.stored import rows
from tests.support.workspace_client import entitle

LEASE_SECONDS = 5
STREAMED = 7  # content chunks the model sends before it stalls or goes away
OWNER = "alice"


@pytest.fixture
def services(db_url: str) -> Iterator[Services]:
    with running_services(db_url, ManualClock(NOON), ROOMY) as running:
        yield running


class CutOffModel:
    """Streams the role chunk and ``STREAMED`` content chunks, then stalls with keep-alives
    until the client leaves (``drop=False``) or drops the connection (``drop=True``)."""

    def __init__(self, *, drop: bool) -> None:
        self.drop = drop
        self.sent = threading.Event()  # the chunks are out
        self.prompt_text = ""
        self.app = Starlette(
            routes=[routing.Route("/v1/chat/completions", self._answer, methods=["POST"])]
        )

    async def _answer(self, request: Request) -> StreamingResponse:
        messages = (await request.json())["messages"]
        self.prompt_text = "".join(message["content"] for message in messages)

        async def body() -> AsyncIterator[bytes]:
            yield sse(chunk(role="assistant"))
            for n in range(STREAMED):
                yield sse(chunk(f'"piece {n}" '))
            self.sent.set()
            if self.drop:
                # The response has started: uvicorn closes the connection mid-body.
                raise ConnectionAbortedError("the model server went away")
            for _ in range(1200):
                await asyncio.sleep(0.05)
                yield b": keep-alive\n\n"

        return StreamingResponse(body(), media_type="text/event-stream")


def _attempts(
    services: Services, operation_id: str
) -> list[tuple[str | None, str | None, int | None, int | None]]:
    found = rows(
        services.db,
        select(OperationAttempt)
        .where(OperationAttempt.operation_id == operation_id)
        .order_by(OperationAttempt.attempt),
    )
    return [
        (row.outcome, row.failure_code, row.prompt_tokens, row.completion_tokens) for row in found
    ]


def _model_ms(services: Services, operation_id: str) -> list[int | None]:
    found = rows(
        services.db, select(OperationAttempt).where(OperationAttempt.operation_id == operation_id)
    )
    return [row.model_ms for row in found]


def _run(
    services: Services, model: CutOffModel, timeout: float, cancel_after_sent: str | None = None
) -> None:
    """Drain the AI worker against ``model``; with ``cancel_after_sent`` (an operation id),
    the owner cancels it once the model has streamed its chunks."""
    ops = OpsClient(services)

    async def scenario(url: str) -> None:
        local = ModelClient(url, "cut-off", route=Route.LOCAL, timeout_seconds=timeout)
        router = Router(local, CircuitBreaker(3, 30))
        async with executor_on(router, Workspace(), Journal(), timeout) as executor:
            running = asyncio.create_task(drain(services, executor, LEASE_SECONDS))
            if cancel_after_sent is not None:
                assert await asyncio.to_thread(model.sent.wait, 10)
                await asyncio.sleep(0.3)  # the chunks reach the worker over loopback
                cancelled = await asyncio.to_thread(ops.cancel, OWNER, cancel_after_sent)
                assert cancelled.cancel_requested
            await asyncio.wait_for(running, 20)

    with serving(model.app) as url:
        asyncio.run(scenario(url))


def test_a_cancel_midway_charges_what_the_model_streamed(services: Services) -> None:
    entitle(services.db, OWNER)
    operation_id = _admit(services, OWNER).operation.id
    model = CutOffModel(drop=False)
    _run(services, model, timeout=30, cancel_after_sent=operation_id)

    prompt = prompt_tokens_of(model.prompt_text)
    assert prompt > 100
    assert OpsClient(services).row(operation_id).state == "cancelled"
    assert _attempts(services, operation_id) == [("cancelled", None, prompt, STREAMED)]
    assert all(ms is not None and ms > 0 for ms in _model_ms(services, operation_id))
    # Spent, the rest of the reservation freed: a cancel is no way to run for free.
    assert _day(services, OWNER) == (0, prompt + STREAMED)


@pytest.mark.parametrize(
    ("drop", "timeout", "failure_code", "exchanges"),
    [(False, 1, "model_timeout", 1), (True, 30, "model_connection_error", 2)],
    ids=["task-timeout", "server-lost"],
)
def test_an_attempt_that_fails_midway_charges_what_the_model_streamed(
    services: Services, drop: bool, timeout: float, failure_code: str, exchanges: int
) -> None:
    """The task timeout (the model stalls), or the model server lost mid-answer: that
    request is sent again once (``inference.router``), lost again here, and both cost."""
    entitle(services.db, OWNER)
    operation_id = _admit(services, OWNER).operation.id
    model = CutOffModel(drop=drop)
    _run(services, model, timeout=timeout)

    prompt = prompt_tokens_of(model.prompt_text) * exchanges
    streamed = STREAMED * exchanges
    assert OpsClient(services).row(operation_id).state == "waiting_for_retry"
    assert _attempts(services, operation_id) == [
        ("failed_retryable", failure_code, prompt, streamed)
    ]
    assert _day(services, OWNER) == (EXPECTED - prompt - streamed, prompt + streamed)
