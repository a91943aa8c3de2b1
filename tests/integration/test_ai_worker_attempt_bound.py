"""The attempt's own bound (``ai_worker.execution``): a model call ends only when the model
falls silent for the task timeout (ADR 64), so a model that keeps trickling an answer is
cut off by the attempt's timeout, the task timeout plus the router's circuit wait and a
margin, and the operation waits to retry as ``task_timeout``.

The real AI worker handler runs against the real Operations service; the model is a
loopback HTTP server that streams a piece of an answer every 0.2 s and never finishes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from starlette import routing
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse

from durable_ops.ai_worker.inference import ModelClient, Router
from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.model.circuit import CircuitBreaker
from durable_ops.model.routing import Route
from tests.integration.test_ai_worker_executor import (
    LEASE_SECONDS,
    STRATEGY,
    Workspace,
    _create,
    executor_on,
    services,
)
from tests.integration.test_inference_client import chunk, serving, sse
from tests.support.ai_worker import Journal, drain
from tests.support.grpc_services import Services
from tests.support.operations_client import OpsClient

__all__ = ["services"]  # the fixture, on both engines

TASK_TIMEOUT_SECONDS = 1.0


async def _trickle(request: Request) -> StreamingResponse:
    async def body() -> AsyncIterator[bytes]:
        yield sse(chunk(role="assistant"))
        for n in range(300):  # a minute: far beyond the attempt's bound
            await asyncio.sleep(0.2)
            yield sse(chunk(f"piece {n} "))

    return StreamingResponse(body(), media_type="text/event-stream")


def test_a_model_that_never_stops_trickling_is_cut_off_by_the_attempts_timeout(
    services: Services,
) -> None:
    ops = OpsClient(services)
    operation_id = _create(ops, "trickle", STRATEGY, pb.PRIVACY_LOCAL_ONLY)
    app = Starlette(routes=[routing.Route("/v1/chat/completions", _trickle, methods=["POST"])])

    async def scenario(url: str) -> None:
        local = ModelClient(url, "trickle", route=Route.LOCAL, timeout_seconds=TASK_TIMEOUT_SECONDS)
        router = Router(local, CircuitBreaker(1, 0.1), ask_again_seconds=0.05)
        async with executor_on(router, Workspace(), Journal(), TASK_TIMEOUT_SECONDS) as executor:
            # A guard far beyond the bound (about 4 s here), not a measure of it.
            await asyncio.wait_for(drain(services, executor, LEASE_SECONDS), 30)

    with serving(app) as url:
        asyncio.run(scenario(url))
    row = ops.row(operation_id)
    assert (row.state, row.failure_code) == ("waiting_for_retry", "task_timeout")
