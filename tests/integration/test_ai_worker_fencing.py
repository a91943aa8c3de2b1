"""Only the attempt holding the lease publishes: the worker against the real services.

Operations and Workspace are the real servicers (one server, both engines), the
model a real HTTP server. Leases are long (600 s) so the keeper stays quiet
and the test decides, with ``ManualClock`` and a sweep, when a lease expires.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, MutableMapping
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import select
from structlog.testing import capture_logs

from durable_ops.ai_worker.clients import WorkspaceClient
from durable_ops.ai_worker.execution import Executor
from durable_ops.ai_worker.inference import ModelClient, Router
from durable_ops.model.circuit import CircuitBreaker
from durable_ops.model.provenance import Provenance
from durable_ops.model.routing import Route
from durable_ops.model.scope import Role
from durable_ops.rpc.client import ServiceCaller, open_channel
from durable_ops.storage.schema import AiWorkspaceNote
from durable_ops.worker import Attempt
from tests.support.ai_stack import ModelServer
from tests.support.ai_worker import Journal, drain
from tests.support.clock import ManualClock
from tests.support.grpc_services import Services
from tests.support.keys import signing_key
from tests.support.operations_client import ALICE, OpsClient
from tests.support.stored import rows
from tests.support.workspace_client import create_job, entitle

LEASE_SECONDS = 600
STRATEGY = "strategy.snapshot"


@asynccontextmanager
async def worker(
    services: Services,
    model: ModelServer,
    workspace_type: type[WorkspaceClient] = WorkspaceClient,
    journal: Journal | None = None,
) -> AsyncIterator[Executor]:
    channel = open_channel(services.target, None)
    caller = ServiceCaller(signing_key(Role.WORKER))
    local = ModelClient(model.url, "dev-heuristic", route=Route.LOCAL, timeout_seconds=30)
    router = Router(local, CircuitBreaker(3, 30))
    executor = Executor(
        workspace_type(channel, caller), router, journal or Journal(), task_timeout_seconds=30
    )
    try:
        yield executor
    finally:
        await router.aclose()
        await channel.close()


def _drained_logging(
    services: Services, workspace_type: type[WorkspaceClient]
) -> list[MutableMapping[str, Any]]:
    """Run the AI work queued on a model of its own until none is left; what it logged."""
    model = ModelServer()

    async def scenario() -> None:
        async with worker(services, model, workspace_type) as executor:
            await drain(services, executor, LEASE_SECONDS)

    with capture_logs() as logs:
        try:
            asyncio.run(scenario())
        finally:
            model.stop()
    return logs


def _operation_on_a_job(services: Services, key: str) -> str:
    entitle(services.db, ALICE)
    job_id = create_job(services.workspace, ALICE)
    return OpsClient(services).create(ALICE, key, subject_id=job_id).id


def _notes(services: Services) -> list[str | None]:
    return [row.operation_id for row in rows(services.db, select(AiWorkspaceNote.operation_id))]


class HeldBeforePublishing(WorkspaceClient):
    """Holds the attempt's publish at a gate, as a stalled worker process would be held."""

    reached: asyncio.Event
    gate: asyncio.Event

    async def publish_note(
        self, attempt: Attempt, body_json: str, provenance: Provenance | None
    ) -> tuple[str, bool]:
        self.reached.set()
        await self.gate.wait()
        return await super().publish_note(attempt, body_json, provenance)


def test_an_attempt_whose_lease_was_taken_over_publishes_nothing(
    services: Services, clock: ManualClock
) -> None:
    operation_id = _operation_on_a_job(services, "taken-over")
    model = ModelServer()

    async def scenario() -> None:
        HeldBeforePublishing.reached, HeldBeforePublishing.gate = asyncio.Event(), asyncio.Event()
        holder_journal = Journal()
        async with (
            worker(services, model, HeldBeforePublishing) as stale,
            worker(services, model, journal=holder_journal) as holder,
        ):
            stale_attempt = asyncio.create_task(drain(services, stale, LEASE_SECONDS))
            await asyncio.wait_for(HeldBeforePublishing.reached.wait(), 30)
            clock.advance(LEASE_SECONDS + 1)
            assert (await asyncio.to_thread(services.sweep)).expired_leases == 1
            clock.advance(60)
            assert (await asyncio.to_thread(services.sweep)).promoted == 1
            await drain(services, holder, LEASE_SECONDS)
            second = holder_journal.started
            assert [(entry.operation_id, entry.attempt) for entry in second] == [(operation_id, 2)]
            HeldBeforePublishing.gate.set()
            await asyncio.wait_for(stale_attempt, 30)

    with capture_logs() as logs:
        try:
            asyncio.run(scenario())
        finally:
            model.stop()
    row = OpsClient(services).row(operation_id)
    assert (row.state, row.attempt) == ("succeeded", 2)
    assert _notes(services) == [operation_id]
    published = [log for log in logs if log["event"] == "note_published"]
    assert [log["new"] for log in published] == [True]  # the holder's, once
    abandoned = [log for log in logs if log["event"] == "attempt_abandoned"]
    assert [(log["attempt"], log.get("code")) for log in abandoned] == [(1, "lease_lost")]
    succeeded = [log for log in logs if log["event"] == "operation_succeeded"]
    assert [(log["attempt"], log["new_note"]) for log in succeeded] == [(2, True)]


class CancelJustBeforePublishing(WorkspaceClient):
    """The owner's cancel lands after the answer is ready and before the note is written."""

    services: Services

    async def publish_note(
        self, attempt: Attempt, body_json: str, provenance: Provenance | None
    ) -> tuple[str, bool]:
        await asyncio.to_thread(OpsClient(self.services).cancel, ALICE, attempt.operation_id)
        return await super().publish_note(attempt, body_json, provenance)


def test_a_cancel_that_lands_before_the_note_wins(services: Services) -> None:
    operation_id = _operation_on_a_job(services, "cancel-before-publish")
    CancelJustBeforePublishing.services = services
    logs = _drained_logging(services, CancelJustBeforePublishing)
    ops = OpsClient(services)
    assert ops.row(operation_id).state == "cancelled"
    assert _notes(services) == []
    # The owner's cancel is no abandoned attempt: no warning for the operator to chase.
    assert [log for log in logs if log["event"] == "attempt_abandoned"] == []
    assert [row.outcome for row in ops.notification_rows(operation_id)] == ["cancelled"]


class CancelWhilePublishing(WorkspaceClient):
    """The owner's cancel lands once the note is written, before its answer reaches the
    attempt: the pushed cancel ends the attempt's lease while the publish is in flight."""

    services: Services

    async def publish_note(
        self, attempt: Attempt, body_json: str, provenance: Provenance | None
    ) -> tuple[str, bool]:
        published = await super().publish_note(attempt, body_json, provenance)
        await asyncio.to_thread(OpsClient(self.services).cancel, ALICE, attempt.operation_id)
        while not attempt.cancelled.is_set():  # the stream delivered it; the task is cancelled
            await asyncio.sleep(0.01)
        return published


def test_a_note_published_before_the_cancel_stands_and_the_operation_succeeds(
    services: Services,
) -> None:
    """The publish runs to its answer even when the cancel arrives meanwhile: a note that
    went through is the operation's result, never a published note of a cancelled one."""
    operation_id = _operation_on_a_job(services, "cancel-while-publishing")
    CancelWhilePublishing.services = services
    logs = _drained_logging(services, CancelWhilePublishing)
    row = OpsClient(services).row(operation_id)
    assert _notes(services) == [operation_id]
    # The note names the model that wrote it, on its route, as the owner's page shows it.
    named = rows(
        services.db,
        select(AiWorkspaceNote.provider, AiWorkspaceNote.model, AiWorkspaceNote.route),
    )
    assert [tuple(note) for note in named] == [("127.0.0.1", "dev-heuristic", "local")]
    assert row.state == "succeeded"
    assert row.result_ref is not None
    succeeded = [log for log in logs if log["event"] == "operation_succeeded"]
    assert [(log["note_id"], log["new_note"]) for log in succeeded] == [(row.result_ref, True)]


class AnswerLostOnce(WorkspaceClient):
    """The publish went through but its answer was lost on the way back: asked again."""

    async def publish_note(
        self, attempt: Attempt, body_json: str, provenance: Provenance | None
    ) -> tuple[str, bool]:
        await super().publish_note(attempt, body_json, provenance)
        return await super().publish_note(attempt, body_json, provenance)


def test_a_publish_asked_again_answers_the_first_and_says_it_is_not_new(
    services: Services,
) -> None:
    operation_id = _operation_on_a_job(services, "asked-again")
    logs = _drained_logging(services, AnswerLostOnce)
    row = OpsClient(services).row(operation_id)
    assert (row.state, _notes(services)) == ("succeeded", [operation_id])
    succeeded = [log for log in logs if log["event"] == "operation_succeeded"]
    assert [(log["note_id"], log["new_note"]) for log in succeeded] == [(row.result_ref, False)]
