"""A new subject kind, registered in a temporary registry, reaches every reader.

This is docs/tasks.md's "Adding a subject kind" made executable: a cover letter
draft, kept like a CV as one of the owner's attachments, becomes a kind by its
``SubjectKind`` entry alone, and a task that works on it by its ``TaskType`` and
instructions. Then the gateway routes the task under the kind's URL segment and
reads the subject through the Workspace RPC the kind names, admission proves a
reference is the caller's own in the table the kind names, and the worker reads
the kind's texts into a section of its prompt. Nothing below edits another
module; each reader runs against the real services and database.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import httpx
import pytest
from sqlalchemy import insert
from starlette.routing import Route

from durable_ops.ai_admission.admit import AdmitRequest, check_subjects
from durable_ops.ai_worker.clients import OwnerWorkspace, WorkspaceClient
from durable_ops.ai_worker.handlers import handlers_for
from durable_ops.ai_worker.prompts import INSTRUCTIONS, SubjectText
from durable_ops.clock import utc_now
from durable_ops.gateway.ai import analysis_module, read_subject
from durable_ops.gateway.app import create_app
from durable_ops.gateway.auth import User
from durable_ops.gateway.backends import Backends
from durable_ops.gateway.calls import OwnerCalls
from durable_ops.model import subjects, tasks
from durable_ops.model.errors import NotFound
from durable_ops.model.scope import ReadLease, Role
from durable_ops.rpc.client import ServiceCaller, open_channel
from durable_ops.storage.operations import leases, new_id
from durable_ops.storage.schema import Attachment
from durable_ops.storage.tx import SCOPE_OWNER
from tests.support.clock import ManualClock
from tests.support.gateway import bearer, gateway_client, gateway_settings, run
from tests.support.grpc_services import Services, running_services
from tests.support.keys import signing_key
from tests.support.operations_client import OpsClient
from tests.support.workspace_client import create_job

COVER_LETTER = subjects.SubjectKind(
    name="cover_letter",
    url_segment="cover-letters",
    label="cover letter",
    table="attachments",
    workspace_read="GetAttachment",
    section="### COVER LETTER",
    fields=(subjects.TextField("text", 4_000),),
)
LETTER_POLISH = tasks.TaskType(
    name="letter.polish",
    label="Letter polish",
    action="Polish cover letter",
    subject=COVER_LETTER,
    context=subjects.JOB,
    answer=tasks.answer(
        {"summary": tasks.text(600), "edits": tasks.items("Edits", 8, tasks.ITEM_MAX)}
    ),
    answer_tokens=tasks.AnswerTokens(alone=300),
    priority=3,
    time_budget=timedelta(minutes=10),
    max_attempts=2,
    retry_delay_seconds=10,
    external_allowed=False,
)
REGISTRY = tasks.TASKS.with_task(LETTER_POLISH)
PROMPTS = {**INSTRUCTIONS, LETTER_POLISH.name: "Suggest edits to the cover letter for the posting."}
LETTER = "Dear Globex team,\nI build Spark pipelines in Python."


@pytest.fixture
def services(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Services]:
    # A worker reads only the rows an analysis of the registry refers to (ADR 62): the
    # Workspace service checks that against the registry the product ships, which the
    # entry in model/tasks.py would extend; this registry stands in for it.
    monkeypatch.setattr(leases, "TASKS", REGISTRY)
    with running_services(db_url, ManualClock()) as running:
        yield running


def _draft(services: Services, owner: str) -> str:
    """A cover letter draft, straight in the database: its upload route is not a reader."""
    draft_id = new_id()
    row = {
        "id": draft_id,
        "kind": "cover_letter",
        "filename": "letter.txt",
        "text": LETTER,
        "created_at": utc_now(),
    }
    draft = insert(Attachment).values(owner_user_id=SCOPE_OWNER)
    services.db.run(lambda tx: tx.execute(draft, row), owner_id=owner)
    return draft_id


def test_the_kind_derives_its_route_and_its_reference_field() -> None:
    assert LETTER_POLISH.path == "/api/cover-letters/{id}/letter-polish"
    assert COVER_LETTER.reference_field == "cover_letter_id"
    assert LETTER_POLISH.public()["subject"] == {
        "name": "cover_letter",
        "label": "cover letter",
        "field": "cover_letter_id",
    }


def test_the_gateway_routes_it_and_reads_the_subject_by_its_kind(services: Services) -> None:
    module = analysis_module(REGISTRY)
    methods = {
        (route.path, method)
        for route in module.routes
        if isinstance(route, Route)
        for method in route.methods or ()
    }
    assert {(LETTER_POLISH.path, "POST"), (LETTER_POLISH.path, "GET")} <= methods
    draft = _draft(services, "alice")

    async def scenario() -> None:
        backends = Backends.from_settings(gateway_settings(services.target))
        try:
            await read_subject(OwnerCalls(backends, User("alice", "bearer")), COVER_LETTER, draft)
            with pytest.raises(NotFound):
                await read_subject(OwnerCalls(backends, User("bob", "bearer")), COVER_LETTER, draft)
        finally:
            await backends.close()
        # Through the route: another owner's draft is a 404 before anything else is asked.
        only_it = analysis_module(tasks.Registry.of(LETTER_POLISH))
        app = create_app(
            gateway_settings(services.target),
            Backends.from_settings(gateway_settings(services.target)),
            modules=[only_it],
        )
        async with gateway_client(app) as client:
            path = f"/api/cover-letters/{draft}/letter-polish"
            answered: httpx.Response = await client.get(path, headers=bearer("bob"))
            assert answered.status_code == 404, answered.text

    run(scenario())


def test_admission_proves_the_subject_is_the_callers_own(services: Services) -> None:
    draft = _draft(services, "alice")
    job = create_job(services.workspace, "alice")
    request = AdmitRequest(LETTER_POLISH.name, subject_id=draft, context_ref=job)
    services.db.run(lambda tx: check_subjects(tx, LETTER_POLISH, request), owner_id="alice")
    with pytest.raises(NotFound) as caught:
        services.db.run(lambda tx: check_subjects(tx, LETTER_POLISH, request), owner_id="bob")
    assert caught.value.code == "cover_letter_not_found"


def _running(services: Services, draft: str, job: str) -> ReadLease:
    """A polish of the draft with the job beside it, claimed: the lease the worker reads
    under (ADR 62)."""
    ops = OpsClient(services)
    request = ops.create_request(
        "polish", task_type=LETTER_POLISH.name, subject_type=COVER_LETTER.name, subject_id=draft
    )
    request.context_ref = job
    ops.create_raw("alice", request)
    lease = ops.claim_one((LETTER_POLISH.name,))
    return ReadLease(lease.id, lease.token)


def test_the_worker_reads_its_text_into_a_section_of_the_prompt(services: Services) -> None:
    draft = _draft(services, "alice")
    job = create_job(services.workspace, "alice", description="Python and Spark.")
    handler = handlers_for(REGISTRY, PROMPTS)[LETTER_POLISH.name]
    lease = _running(services, draft, job)

    async def scenario() -> list[SubjectText]:
        channel = open_channel(services.target, None)
        try:
            client = WorkspaceClient(channel, ServiceCaller(signing_key(Role.WORKER)))
            refs = handler.refs_for("cover_letter", draft, job)
            texts = await handler.inputs(OwnerWorkspace(client, "alice", lease), refs)
            with pytest.raises(NotFound):
                await client.read("bob", lease, COVER_LETTER, draft)
            return texts
        finally:
            await channel.close()

    texts = run(scenario())
    assert texts[0] == SubjectText.of(COVER_LETTER, text=LETTER)
    system, user = handler.request(texts).messages
    assert user["content"].splitlines() == [
        "Task: letter.polish",
        "### JOB POSTING",
        "Title: Engineer",
        "Company: Acme",
        "Description:",
        "Python and Spark.",
        "### COVER LETTER",
        *LETTER.splitlines(),
        "### END",
    ]
    assert "summary (at most 600 characters), edits (at most 8 items" in system["content"]
