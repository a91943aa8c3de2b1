"""Workspace.PublishNote is owner-scoped: the note's operation must be the caller's owner's.

Issue 20, item 2, through real servers on both engines. A worker credential
speaks for the owner named in ``x-owner-id``; the operation a note references
must be that owner's (another owner's answers exactly like a missing one:
NOT_FOUND ``operation_not_found``), and the lease check still applies to the
owner's own operations. Only a worker credential publishes; a body or a lease token
past its bound is the caller's error (INVALID_ARGUMENT on the field).
"""

from __future__ import annotations

import uuid
from typing import Any

import grpc
import pytest
from sqlalchemy import select

from durable_ops.api.workspace.v1 import workspace_pb2 as wpb
from durable_ops.model import bounds
from durable_ops.model.scope import Role
from durable_ops.storage import workspace
from durable_ops.storage.schema import AiWorkspaceNote
from tests.support.grpc_services import Services
from tests.support.operations_client import (
    ALICE,
    BOB,
    TASK,
    Lease,
    OpsClient,
    RpcFailure,
    expect_failure,
    rpc_failure,
)
from tests.support.stored import rows
from tests.support.workspace_client import create_job

NOT_FOUND = grpc.StatusCode.NOT_FOUND


def _publish(
    services: Services,
    ops: OpsClient,
    *,
    owner: str,
    operation_id: str,
    token: str,
    subject_id: str,
    body: str = '{"from":"test"}',
    kind: str = TASK,
) -> Any:
    request = _note(operation_id, token, subject_id, body, kind)
    return services.workspace.PublishNote(request, metadata=ops.md(Role.WORKER, owner))


def _note(
    operation_id: str, token: str, subject_id: str, body: str = '{"from":"test"}', kind: str = TASK
) -> wpb.PublishNoteRequest:
    return wpb.PublishNoteRequest(
        kind=kind,
        subject_type="job",
        subject_id=subject_id,
        operation_id=operation_id,
        lease_token=token,
        body_json=body,
    )


def _claimed_for(services: Services, ops: OpsClient, owner: str, key: str) -> Lease:
    job_id = create_job(services.workspace, owner)
    ops.create(owner, key, subject_id=job_id)
    lease = ops.claim_one()
    assert lease.owner == owner
    return lease


def _notes(services: Services) -> list[tuple[str, str | None]]:
    found = rows(services.db, select(AiWorkspaceNote.owner_user_id, AiWorkspaceNote.operation_id))
    return [(row.owner_user_id, row.operation_id) for row in found]


def _note_of(services: Services, ops: OpsClient, owner: str, subject_id: str) -> Any:
    return services.workspace.GetNote(
        wpb.GetNoteRequest(kind=TASK, subject_type="job", subject_id=subject_id),
        metadata=ops.md(Role.GATEWAY, owner),
    )


def _same_answer(one: RpcFailure, other: RpcFailure) -> None:
    assert (one.code, one.details, one.error_code, one.error_field) == (
        other.code,
        other.details,
        other.error_code,
        other.error_field,
    )


def test_a_worker_speaking_for_bob_cannot_attach_a_note_to_alices_operation(
    services: Services,
) -> None:
    ops = OpsClient(services)
    alices = _claimed_for(services, ops, ALICE, "alice-op")
    bobs_job = create_job(services.workspace, BOB)

    expect_failure(
        lambda: _publish(
            services,
            ops,
            owner=BOB,
            operation_id=alices.id,
            token=alices.token,  # even the live lease of alice's attempt
            subject_id=bobs_job,
        ),
        NOT_FOUND,
        "operation_not_found",
    )
    assert _notes(services) == []
    expect_failure(lambda: _note_of(services, ops, BOB, bobs_job), NOT_FOUND, "note_not_found")

    # Alice's attempt still holds its lease and publishes for alice.
    published = _publish(
        services,
        ops,
        owner=ALICE,
        operation_id=alices.id,
        token=alices.token,
        subject_id=alices.operation.subject.id,
    )
    assert published.published is True
    assert _notes(services) == [(ALICE, alices.id)]


def test_another_owners_operation_answers_exactly_like_a_missing_one(
    services: Services,
) -> None:
    ops = OpsClient(services)
    alices = _claimed_for(services, ops, ALICE, "alice-op")
    bobs_job = create_job(services.workspace, BOB)

    def attempt(operation_id: str) -> RpcFailure:
        return rpc_failure(
            lambda: _publish(
                services,
                ops,
                owner=BOB,
                operation_id=operation_id,
                token=alices.token,
                subject_id=bobs_job,
            )
        )

    foreign = attempt(alices.id)
    missing = attempt(str(uuid.uuid4()))
    assert (missing.code, missing.error_code) == (NOT_FOUND, "operation_not_found")
    _same_answer(foreign, missing)
    assert _notes(services) == []


@pytest.mark.parametrize(
    ("operation_id", "status", "error_code", "field"),
    [
        # Well-formed but not found: NOT_FOUND, never INTERNAL (a foreign-key error).
        ("unknown-operation", NOT_FOUND, "operation_not_found", None),
        ("x" * bounds.ID_MAX, NOT_FOUND, "operation_not_found", None),
        # Empty or longer than any issued id: the caller's error, on the field.
        ("", grpc.StatusCode.INVALID_ARGUMENT, "invalid_argument", "operation_id"),
        (
            "x" * (bounds.ID_MAX + 1),
            grpc.StatusCode.INVALID_ARGUMENT,
            "invalid_argument",
            "operation_id",
        ),
    ],
)
def test_an_operation_id_that_names_nothing_is_refused_and_writes_nothing(
    services: Services,
    operation_id: str,
    status: grpc.StatusCode,
    error_code: str,
    field: str | None,
) -> None:
    ops = OpsClient(services)
    job_id = create_job(services.workspace, ALICE)
    expect_failure(
        lambda: _publish(
            services,
            ops,
            owner=ALICE,
            operation_id=operation_id,
            token="t" * 32,
            subject_id=job_id,
        ),
        status,
        error_code,
        field=field,
    )
    assert _notes(services) == []


def test_the_owners_own_operation_still_needs_the_live_lease(services: Services) -> None:
    ops = OpsClient(services)
    job_id = create_job(services.workspace, ALICE)
    queued = ops.create(ALICE, "never-claimed", subject_id=job_id)
    expect_failure(
        lambda: _publish(
            services, ops, owner=ALICE, operation_id=queued.id, token="t" * 32, subject_id=job_id
        ),
        grpc.StatusCode.ABORTED,
        "lease_lost",
    )

    lease = ops.claim_one()
    assert lease.id == queued.id
    expect_failure(
        lambda: _publish(
            services, ops, owner=ALICE, operation_id=lease.id, token="w" * 32, subject_id=job_id
        ),
        grpc.StatusCode.ABORTED,
        "lease_lost",
    )
    assert _notes(services) == []


def test_a_note_of_another_kind_or_subject_than_its_operation_is_refused(
    services: Services,
) -> None:
    ops = OpsClient(services)
    lease = _claimed_for(services, ops, ALICE, "alice-op")
    other_job = create_job(services.workspace, ALICE)
    publish = {"owner": ALICE, "operation_id": lease.id, "token": lease.token}
    expect_failure(
        lambda: _publish(services, ops, subject_id=other_job, **publish),
        grpc.StatusCode.INVALID_ARGUMENT,
        "invalid_argument",
        field="subject_id",
    )
    expect_failure(
        lambda: _publish(
            services, ops, subject_id=lease.operation.subject.id, kind="cv.review", **publish
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "invalid_argument",
        field="kind",
    )
    assert _notes(services) == []


@pytest.mark.parametrize(
    "body",
    ["<script>alert(1)</script>", "[1, 2]", '"text"', '{"score": NaN}', "{"],
    ids=["markup", "a-list", "a-string", "nan", "cut-short"],
)
def test_a_body_the_page_cannot_show_is_refused_and_the_lease_publishes_after(
    services: Services, body: str
) -> None:
    """The results page reads the body as a JSON object (a 500 once it was stored)."""
    ops = OpsClient(services)
    lease = _claimed_for(services, ops, ALICE, "alice-op")
    subject_id = lease.operation.subject.id
    publish = {"owner": ALICE, "operation_id": lease.id, "token": lease.token}
    expect_failure(
        lambda: _publish(services, ops, subject_id=subject_id, body=body, **publish),
        grpc.StatusCode.INVALID_ARGUMENT,
        "answer_mismatch",
        field="body_json",
    )
    assert _notes(services) == []
    assert _publish(services, ops, subject_id=subject_id, **publish).published


def test_a_body_longer_than_a_result_keeps_is_refused_and_the_longest_is_kept_whole(
    services: Services,
) -> None:
    ops = OpsClient(services)
    lease = _claimed_for(services, ops, ALICE, "alice-op")
    publish = {"owner": ALICE, "operation_id": lease.id, "token": lease.token}
    subject_id = lease.operation.subject.id
    answer = '{"from":"test"}'
    longest = answer.ljust(workspace.NOTE_BODY_MAX)  # JSON may end in white space
    expect_failure(
        lambda: _publish(services, ops, subject_id=subject_id, body=longest + " ", **publish),
        grpc.StatusCode.INVALID_ARGUMENT,
        "invalid_argument",
        field="body_json",
    )
    assert _notes(services) == []
    assert _publish(services, ops, subject_id=subject_id, body=longest, **publish).published
    assert _note_of(services, ops, ALICE, subject_id).body_json == longest


@pytest.mark.parametrize("token", ["", "t" * (bounds.LEASE_TOKEN_MAX + 1)], ids=["empty", "long"])
def test_a_lease_token_no_lease_could_have_is_the_callers_error_not_a_lost_lease(
    services: Services, token: str
) -> None:
    """A worker that sends no token, or one longer than any issued, has a bug to fix:
    INVALID_ARGUMENT on the field, where a wrong token of a token's shape is ``lease_lost``
    (the attempt lost its lease and stops)."""
    ops = OpsClient(services)
    lease = _claimed_for(services, ops, ALICE, "alice-op")
    publish = {"owner": ALICE, "operation_id": lease.id, "subject_id": lease.operation.subject.id}
    expect_failure(
        lambda: _publish(services, ops, token=token, **publish),
        grpc.StatusCode.INVALID_ARGUMENT,
        "invalid_argument",
        field="lease_token",
    )
    expect_failure(
        lambda: _publish(services, ops, token="t" * bounds.LEASE_TOKEN_MAX, **publish),
        grpc.StatusCode.ABORTED,
        "lease_lost",
    )
    assert _notes(services) == []
    assert _publish(services, ops, token=lease.token, **publish).published


@pytest.mark.parametrize("role", [Role.GATEWAY, Role.PRODUCER])
def test_only_a_worker_publishes_a_note(services: Services, role: Role) -> None:
    """Even naming the live lease of the owner's operation: a result is the worker's to
    publish, for the attempt it runs."""
    ops = OpsClient(services)
    lease = _claimed_for(services, ops, ALICE, "alice-op")
    request = _note(lease.id, lease.token, lease.operation.subject.id)
    expect_failure(
        lambda: services.workspace.PublishNote(request, metadata=ops.md(role, ALICE)),
        grpc.StatusCode.PERMISSION_DENIED,
        "worker_role_required",
    )
    assert _notes(services) == []
