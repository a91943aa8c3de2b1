"""A short model-server outage does not use up an analysis's attempts, on both engines.

The local model refuses connections, then comes back. The first two attempts fail
``model_connection_error`` and open the circuit; the third, claimed while it is still
open, must not be refused ``circuit_open`` (a refusal that never reached the model,
yet spent the last attempt: the analysis failed before the model was back). It waits
for the circuit to half-open and runs as its trial (``inference.router``). The real AI
worker handler runs against the real Operations service; the breaker on the real clock,
with a cooldown of a few seconds standing for the 30 s default.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from sqlalchemy import select

from durable_ops.ai_worker.inference import ModelClient, Router
from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.model.circuit import CircuitBreaker, CircuitState
from durable_ops.model.routing import Route
from durable_ops.storage.schema import OperationAttempt
from tests.integration.test_ai_worker_executor import Workspace, executor_on
from tests.support.ai_stack import ModelServer
from tests.support.ai_worker import Journal, drain
from tests.support.clock import ManualClock
from tests.support.grpc_services import Services, running_services
from tests.support.operations_client import ALICE, OpsClient
from tests.support.ports import free_port
from tests.support.stored import rows

LEASE_SECONDS = 5
COOLDOWN_SECONDS = 3.0
BACK_AFTER_SECONDS = 1.0  # into the third attempt's wait: the outage is over


@pytest.fixture
def services(db_url: str) -> Iterator[Services]:
    with running_services(db_url, ManualClock()) as running:
        yield running


def _failure_codes(services: Services, operation_id: str) -> list[tuple[str | None, ...]]:
    found = rows(
        services.db,
        select(OperationAttempt)
        .where(OperationAttempt.operation_id == operation_id)
        .order_by(OperationAttempt.attempt),
    )
    return [(row.outcome, row.failure_code) for row in found]


def test_an_analysis_survives_a_model_outage_shorter_than_the_cooldown(
    services: Services,
) -> None:
    ops = OpsClient(services)
    clock = services.clock
    assert isinstance(clock, ManualClock)
    port = free_port()  # nothing listens yet: every connection is refused
    request = ops.create_request(
        "outage", task_type="strategy.snapshot", max_attempts=3, retry_delay_seconds=5
    )
    request.privacy = pb.PRIVACY_LOCAL_ONLY  # nowhere else to go: no fallback
    operation_id = str(ops.create_raw(ALICE, request).operation.id)
    breaker = CircuitBreaker(2, COOLDOWN_SECONDS)
    servers: list[ModelServer] = []

    def retry_due() -> None:
        clock.advance(60)
        assert services.sweep().promoted == 1

    async def scenario() -> float:
        local = ModelClient(
            f"http://127.0.0.1:{port}/v1", "dev-heuristic", route=Route.LOCAL, timeout_seconds=10
        )
        router = Router(local, breaker)
        async with executor_on(router, Workspace(), Journal(), 10) as executor:
            for _ in range(2):
                await drain(services, executor, LEASE_SECONDS)
                await asyncio.to_thread(retry_due)
            assert breaker.state(time.monotonic()) is CircuitState.OPEN
            started = time.monotonic()
            third = asyncio.create_task(drain(services, executor, LEASE_SECONDS))
            await asyncio.sleep(BACK_AFTER_SECONDS)
            assert not third.done()  # waiting for the circuit, not failed circuit_open
            servers.append(await asyncio.to_thread(ModelServer, port=port))  # it is back
            await asyncio.wait_for(third, COOLDOWN_SECONDS + 10)
            return time.monotonic() - started

    try:
        waited = asyncio.run(scenario())
    finally:
        for server in servers:
            server.stop()

    row = ops.row(operation_id)
    assert (row.state, row.attempt) == ("succeeded", 3)
    assert _failure_codes(services, operation_id) == [
        ("failed_retryable", "model_connection_error"),
        ("failed_retryable", "model_connection_error"),
        ("succeeded", None),
    ]
    (server,) = servers
    assert server.completions == 1  # the half-open trial, once the circuit let it go
    assert waited < COOLDOWN_SECONDS + 5
