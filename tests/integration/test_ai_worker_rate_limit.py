"""A model's 429 whose Retry-After passes the call's wait bound (ADR 68), through the real
AI worker handler and the real Operations service, on both engines: the operation's next
attempt waits for the Retry-After, not for its own retry delay alone (5-10 s here), and
one the deadline comes before ends the operation now, ``model_rate_limited``.

The model server is a loopback Starlette app that answers every request 429. The router's
wall clock (a Retry-After date is measured on it) is the services' ``ManualClock``; with
a Retry-After past the bound the router never sleeps, so nothing here is timed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
from starlette import routing
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse

from durable_ops.ai_worker.inference import ModelClient, Router
from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.model.circuit import CircuitBreaker
from durable_ops.model.routing import Route
from tests.integration.test_ai_worker_executor import Workspace, executor_on
from tests.integration.test_inference_client import serving
from tests.support.ai_worker import Journal, drain
from tests.support.clock import ManualClock
from tests.support.grpc_services import Services, running_services
from tests.support.operations_client import ALICE, FAILED, WAITING_FOR_RETRY, OpsClient

LEASE_SECONDS = 30
HOUR = timedelta(hours=1)


@pytest.fixture
def services(db_url: str) -> Iterator[Services]:
    with running_services(db_url, ManualClock()) as running:
        yield running


def _rate_limited(retry_after: str) -> tuple[Starlette, list[int]]:
    """A model server that answers every request 429 with ``retry_after``; its answers."""
    answered: list[int] = []

    async def chat(request: Request) -> JSONResponse:
        await request.body()
        answered.append(429)
        body = {"error": {"message": "rate limited"}}
        return JSONResponse(body, status_code=429, headers={"Retry-After": retry_after})

    app = Starlette(routes=[routing.Route("/v1/chat/completions", chat, methods=["POST"])])
    return app, answered


def _analysis(ops: OpsClient, key: str, deadline: datetime | None = None) -> str:
    request = ops.create_request(
        key, task_type="strategy.snapshot", retry_delay_seconds=5, deadline=deadline
    )
    request.privacy = pb.PRIVACY_LOCAL_ONLY  # nowhere else to go: no fallback
    return str(ops.create_raw(ALICE, request).operation.id)


def _attempt_on(services: Services, retry_after: str) -> list[int]:
    """Run the AI worker once against a model that answers 429 with ``retry_after``."""
    app, answered = _rate_limited(retry_after)
    clock = services.clock
    assert isinstance(clock, ManualClock)

    async def scenario() -> None:
        local = ModelClient(url, "dev-heuristic", route=Route.LOCAL, timeout_seconds=10)
        router = Router(local, CircuitBreaker(3, 30.0), wall_clock=clock)
        assert router.circuit_wait_seconds < 3600  # the Retry-After passes the call's bound
        async with executor_on(router, Workspace(), Journal(), 10) as executor:
            await asyncio.wait_for(drain(services, executor, LEASE_SECONDS), 30)

    with serving(app) as url:
        asyncio.run(scenario())
    return answered


def _state(ops: OpsClient, operation_id: str) -> tuple[int, str, int]:
    shown = ops.get(ALICE, operation_id)
    return shown.state, shown.failure_code, shown.attempt


def test_a_429_to_come_back_in_an_hour_leaves_the_analysis_waiting_an_hour(
    services: Services,
) -> None:
    ops = OpsClient(services)
    operation_id = _analysis(ops, "in-an-hour")
    failed_at = services.clock()
    assert _attempt_on(services, "3600") == [429]  # past the bound: not asked again
    assert _state(ops, operation_id) == (WAITING_FOR_RETRY, "", 1)
    next_attempt_at = ops.get(ALICE, operation_id).next_attempt_at.ToDatetime(tzinfo=UTC)
    assert next_attempt_at == failed_at + HOUR  # not the 5-10 s of its own retry delay
    assert ops.row(operation_id).failure_code == "model_rate_limited"


def test_a_retry_after_date_is_measured_on_the_workers_clock(services: Services) -> None:
    ops = OpsClient(services)
    operation_id = _analysis(ops, "at-a-date")
    come_back = (services.clock() + 2 * HOUR).replace(microsecond=0)
    assert _attempt_on(services, format_datetime(come_back, usegmt=True)) == [429]
    next_attempt_at = ops.get(ALICE, operation_id).next_attempt_at.ToDatetime(tzinfo=UTC)
    assert next_attempt_at == come_back


def test_a_429_to_come_back_after_the_deadline_fails_the_analysis_now(
    services: Services,
) -> None:
    """An admitted analysis has 30 minutes (its time budget): an hour's wait would only
    hold it until the sweeper failed it ``deadline_exceeded``, hiding the reason."""
    ops = OpsClient(services)
    deadline = services.clock() + timedelta(minutes=30)
    operation_id = _analysis(ops, "past-the-deadline", deadline)
    assert _attempt_on(services, "3600") == [429]
    assert _state(ops, operation_id) == (FAILED, "model_rate_limited", 1)
    assert services.sweep().total == 0
