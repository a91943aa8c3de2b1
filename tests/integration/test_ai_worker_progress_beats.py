"""What the owner sees of an answer while it streams: its progress and its draft go out
on the attempt's lease beats (``ai_worker.execution``), on both engines.

The real AI worker handler runs against the real Operations service; the model is a
loopback HTTP server that streams the start of an answer and then stalls, so the
attempt is caught midway, and the owner's cancel ends it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from sqlalchemy import select

from durable_ops.ai_worker.inference import ModelClient, Router
from durable_ops.model.circuit import CircuitBreaker
from durable_ops.model.routing import Route
from durable_ops.storage.schema import AnswerDraft
from tests.integration.test_ai_worker_cut_off_usage import LEASE_SECONDS, OWNER, CutOffModel
from tests.integration.test_ai_worker_executor import Workspace, executor_on
from tests.integration.test_inference_client import serving
from tests.integration.test_token_budgets import NOON, ROOMY, _admit
from tests.support.ai_worker import Journal, drain
from tests.support.clock import ManualClock
from tests.support.grpc_services import Services, running_services
from tests.support.operations_client import OpsClient
from tests.support.stored import rows
from tests.support.workspace_client import entitle


@pytest.fixture
def services(db_url: str) -> Iterator[Services]:
    with running_services(db_url, ManualClock(NOON), ROOMY) as running:
        yield running


def _draft(services: Services, operation_id: str) -> str | None:
    found = rows(
        services.db, select(AnswerDraft.body).where(AnswerDraft.operation_id == operation_id)
    )
    return str(found[0].body) if found else None


def test_a_streaming_answer_shows_its_progress_with_its_draft(services: Services) -> None:
    entitle(services.db, OWNER)
    operation_id = _admit(services, OWNER).operation.id
    model = CutOffModel(drop=False)
    ops = OpsClient(services)
    seen: dict[str, object] = {}

    async def scenario(url: str) -> None:
        local = ModelClient(url, "cut-off", route=Route.LOCAL, timeout_seconds=30)
        router = Router(local, CircuitBreaker(3, 30))
        async with executor_on(router, Workspace(), Journal(), 30) as executor:
            running = asyncio.create_task(drain(services, executor, LEASE_SECONDS))
            async with asyncio.timeout(20):  # a guard: the beat comes every third of the lease
                while (draft := _draft(services, operation_id)) is None:
                    await asyncio.sleep(0.05)
            # The beat that carried the draft carried the progress too.
            seen["draft"], seen["progress"] = draft, ops.row(operation_id).progress_percent
            await asyncio.to_thread(ops.cancel, OWNER, operation_id)
            await asyncio.wait_for(running, 20)

    with serving(model.app) as url:
        asyncio.run(scenario(url))
    assert "piece 0" in str(seen["draft"])
    progress = seen["progress"]
    assert isinstance(progress, int)
    assert 0 < progress < 100
