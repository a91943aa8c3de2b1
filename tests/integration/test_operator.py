"""The operator scope (SPEC §2, ADR 19) through the real servers, on both engines.

An ``operator`` credential without ``x-owner-id`` lists, shows, cancels and
retries operations of every owner; each cancel and retry is the owner's own,
run in the owner's scope (same decisions, same notifications, same push to a
running lease holder); every call is logged with who made it. No other
credential, with or without any ``x-owner-id``, reaches the operator service,
and the operator credential reaches nothing but it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import Any

import grpc
import pytest
from structlog.testing import capture_logs

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.api.operator.v1 import operator_pb2 as opb
from durable_ops.model.scope import Role
from durable_ops.operator_cli import EXIT_NOT_CONFIRMED
from durable_ops.rpc.scope import OPERATOR_SESSION
from tests.support.clock import ManualClock
from tests.support.grpc_services import Services, metadata
from tests.support.operations_client import (
    ALICE,
    BOB,
    CANCELLED,
    FAILED,
    OTHER_TASK,
    QUEUED,
    RUNNING,
    Metadata,
    OpsClient,
    expect_failure,
    rpc_failure,
)
from tests.support.workspace_client import create_job

DENIED = grpc.StatusCode.PERMISSION_DENIED
NOT_FOUND = grpc.StatusCode.NOT_FOUND
INVALID = grpc.StatusCode.INVALID_ARGUMENT
OPERATOR_NAME = "ops-carol"


def _list(services: Services, md: Metadata, **fields: Any) -> opb.ListOperationsResponse:
    found: opb.ListOperationsResponse = services.operator.ListOperations(
        opb.ListOperationsRequest(**fields), metadata=md
    )
    return found


def _ids(page: opb.ListOperationsResponse) -> list[str]:
    return [found.operation.id for found in page.operations]


def _outcomes(ops: OpsClient, operation_id: str) -> list[str]:
    return [row.outcome for row in ops.notification_rows(operation_id)]


# ---- list and show across owners -------------------------------------------------------------


def test_operator_lists_every_owner_with_filters_and_pages(
    services: Services, ops: OpsClient, clock: ManualClock, operator_md: Metadata
) -> None:
    old_alice = ops.create(ALICE, "k-old-alice")
    clock.advance(1)
    old_bob = ops.create(BOB, "k-old-bob", task_type=OTHER_TASK)
    clock.advance(3 * 3600)
    new_bob = ops.create(BOB, "k-new-bob")
    cancelled = ops.cancel(BOB, new_bob.id)
    assert cancelled.state == CANCELLED

    everything = _list(services, operator_md)
    assert _ids(everything) == [new_bob.id, old_bob.id, old_alice.id]  # newest first
    assert [found.owner_id for found in everything.operations] == [BOB, BOB, ALICE]
    assert _ids(_list(services, operator_md, owner_id=BOB)) == [new_bob.id, old_bob.id]
    assert _ids(_list(services, operator_md, state=QUEUED)) == [old_bob.id, old_alice.id]
    assert _ids(_list(services, operator_md, task_type=OTHER_TASK)) == [old_bob.id]
    aged = opb.ListOperationsRequest(owner_id=BOB)
    aged.older_than.FromTimedelta(timedelta(hours=2))
    found: opb.ListOperationsResponse = services.operator.ListOperations(aged, metadata=operator_md)
    assert _ids(found) == [old_bob.id]

    first = _list(services, operator_md, page_size=2)
    assert _ids(first) == [new_bob.id, old_bob.id]
    assert first.next_page_token
    rest = _list(services, operator_md, page_size=2, page_token=first.next_page_token)
    assert _ids(rest) == [old_alice.id]
    assert rest.next_page_token == ""

    expect_failure(lambda: _list(services, operator_md, owner_id="not an owner!"), INVALID)
    expect_failure(lambda: _list(services, operator_md, task_type="Bad Task"), INVALID)


def test_an_age_filter_takes_an_operation_created_exactly_that_long_ago(
    services: Services, ops: OpsClient, clock: ManualClock, operator_md: Metadata
) -> None:
    """``--older-than 2h``: created at least two hours ago, that very instant included."""
    exactly = ops.create(ALICE, "k-exactly")
    clock.advance(1)
    ops.create(ALICE, "k-younger")
    clock.advance(2 * 3600 - 1)
    aged = opb.ListOperationsRequest()
    aged.older_than.FromTimedelta(timedelta(hours=2))
    found: opb.ListOperationsResponse = services.operator.ListOperations(aged, metadata=operator_md)
    assert _ids(found) == [exactly.id]


def test_operator_show_adds_owner_lease_and_failure_to_the_owners_view(
    services: Services, ops: OpsClient, operator_md: Metadata
) -> None:
    created = ops.create(BOB, "k-show", max_attempts=1)
    lease = ops.claim_one()
    shown: opb.OperatorOperation = services.operator.GetOperation(
        opb.GetOperationRequest(operation_id=created.id), metadata=operator_md
    )
    assert (shown.owner_id, shown.operation.state) == (BOB, RUNNING)
    assert shown.HasField("lease_expires_at")
    assert shown.operation == ops.get(BOB, created.id)  # the owner's view, unchanged inside it

    assert ops.fail(lease, retryable=False, code="model_error", message="the model said no") == (
        FAILED
    )
    failed: opb.OperatorOperation = services.operator.GetOperation(
        opb.GetOperationRequest(operation_id=created.id), metadata=operator_md
    )
    assert (failed.failure_code, failed.failure_message) == ("model_error", "the model said no")
    assert not failed.HasField("lease_expires_at")
    owners_view = ops.get(BOB, created.id)
    assert "the model said no" not in str(owners_view)  # the owner's DTO stays as it was

    for unknown in ("0" * 32, "", "x" * 65):
        request = opb.GetOperationRequest(operation_id=unknown)
        expect_failure(
            partial(services.operator.GetOperation, request, metadata=operator_md),
            NOT_FOUND,
            "operation_not_found",
        )


# ---- cancel and retry as the owner would ------------------------------------------------------


def test_operator_cancel_and_retry_across_two_owners(
    services: Services, ops: OpsClient, operator_md: Metadata
) -> None:
    alices = ops.create(ALICE, "k-alice")
    # A real job: an operator's retry of an analysis of a missing one is refused (ADR 65).
    bobs = ops.create(BOB, "k-bob", subject_id=create_job(services.workspace, BOB))
    with capture_logs() as logs:
        for operation_id in (alices.id, bobs.id):
            done: opb.OperatorOperation = services.operator.CancelOperation(
                opb.CancelOperationRequest(operation_id=operation_id), metadata=operator_md
            )
            assert done.operation.state == CANCELLED
    assert ops.get(ALICE, alices.id).state == CANCELLED
    assert ops.get(BOB, bobs.id).state == CANCELLED
    # The owner's cancel, so the owner's notification, in the same transaction.
    assert _outcomes(ops, alices.id) == ["cancelled"]
    assert _outcomes(ops, bobs.id) == ["cancelled"]
    assert ops.unread(ALICE) == 1
    assert ops.unread(BOB) == 1
    cancels = [entry for entry in logs if entry["event"] == "operator_cancel"]
    assert [(e["operator"], e["operation_id"], e["owner"]) for e in cancels] == [
        (OPERATOR_NAME, alices.id, ALICE),
        (OPERATOR_NAME, bobs.id, BOB),
    ]

    with capture_logs() as logs:
        retried: opb.OperatorOperation = services.operator.RetryOperation(
            opb.RetryOperationRequest(operation_id=bobs.id), metadata=operator_md
        )
    assert (retried.owner_id, retried.operation.state) == (BOB, QUEUED)
    assert ops.get(BOB, bobs.id).state == QUEUED
    assert ops.get(ALICE, alices.id).state == CANCELLED
    assert _outcomes(ops, bobs.id) == []  # the owner's retry takes its notification back
    assert [(e["event"], e["operator"], e["operation_id"]) for e in logs if "operator" in e] == [
        ("operator_retry", OPERATOR_NAME, bobs.id)
    ]
    lease = ops.claim_one()
    assert (lease.id, lease.owner) == (bobs.id, BOB)


def test_operator_cancel_of_a_running_operation_is_pushed_to_the_holder(
    services: Services, ops: OpsClient, operator_md: Metadata
) -> None:
    created = ops.create(BOB, "k-running")
    lease = ops.claim_one()
    stream = ops.stream(lease)
    assert stream.beat().cancel_requested is False
    requested: opb.OperatorOperation = services.operator.CancelOperation(
        opb.CancelOperationRequest(operation_id=created.id), metadata=operator_md
    )
    assert (requested.operation.state, requested.operation.cancel_requested) == (RUNNING, True)
    pushed = stream.read()
    assert (pushed.pushed, pushed.cancel_requested) == (True, True)
    stream.close()
    assert ops.acknowledge_cancel(lease) == CANCELLED


def test_operator_retry_follows_the_owner_rules(
    services: Services, ops: OpsClient, operator_md: Metadata
) -> None:
    queued = ops.create(ALICE, "k-queued")
    owner_refused = rpc_failure(lambda: ops.retry(ALICE, queued.id))
    assert owner_refused.error_code == "not_retryable"
    expect_failure(
        lambda: services.operator.RetryOperation(
            opb.RetryOperationRequest(operation_id=queued.id), metadata=operator_md
        ),
        owner_refused.code,
        "not_retryable",
    )
    assert ops.get(ALICE, queued.id).state == QUEUED


def test_a_refused_operator_call_is_logged_once_with_who_and_its_code(
    services: Services, ops: OpsClient, operator_md: Metadata
) -> None:
    created = ops.create(BOB, "k-refused")
    ops.complete(ops.claim_one())
    console_md = (*metadata(Role.GATEWAY, subject="gateway"), (OPERATOR_SESSION, "ended"))
    with capture_logs() as logs:
        expect_failure(
            lambda: services.operator.CancelOperation(
                opb.CancelOperationRequest(operation_id=created.id), metadata=operator_md
            ),
            grpc.StatusCode.FAILED_PRECONDITION,
        )
        expect_failure(
            lambda: services.operator.GetOperation(
                opb.GetOperationRequest(operation_id="0" * 32), metadata=operator_md
            ),
            NOT_FOUND,
        )
        expect_failure(
            lambda: services.operator.PauseTaskType(
                opb.PauseTaskTypeRequest(task_type="Bad Type"), metadata=operator_md
            ),
            INVALID,
        )
        expect_failure(  # refused before anyone is known to act: no operator to name
            lambda: services.operator.ListOperations(
                opb.ListOperationsRequest(), metadata=console_md
            ),
            grpc.StatusCode.UNAUTHENTICATED,
        )
    refused = [entry for entry in logs if entry["event"] == "operator_refused"]
    assert [(e["operator"], e["via"], e["call"], e["code"]) for e in refused] == [
        (OPERATOR_NAME, "opsctl", "CancelOperation", "already_terminal"),
        (OPERATOR_NAME, "opsctl", "GetOperation", "operation_not_found"),
        (OPERATOR_NAME, "opsctl", "PauseTaskType", "invalid_argument"),
    ]
    assert [entry["event"] for entry in logs if "operator" in entry] == ["operator_refused"] * 3


def test_each_audit_line_says_what_the_call_did(
    services: Services, ops: OpsClient, operator_md: Metadata
) -> None:
    """The audit trail answers from the line alone: which filter a list searched and how
    many it found; the state, attempt and cancel request a cancel left; whether a pause or
    a resume changed anything; how many task types were paused when listed."""
    running = ops.create(BOB, "k-audited")
    ops.claim_one()
    pause = opb.PauseTaskTypeRequest(task_type=OTHER_TASK)
    resume = opb.ResumeTaskTypeRequest(task_type=OTHER_TASK)
    with capture_logs() as logs:
        _list(services, operator_md, owner_id=BOB)
        services.operator.CancelOperation(
            opb.CancelOperationRequest(operation_id=running.id), metadata=operator_md
        )
        services.operator.PauseTaskType(pause, metadata=operator_md)
        services.operator.PauseTaskType(pause, metadata=operator_md)
        services.operator.ListTaskTypes(opb.ListTaskTypesRequest(), metadata=operator_md)
        services.operator.ResumeTaskType(resume, metadata=operator_md)
        services.operator.ResumeTaskType(resume, metadata=operator_md)
    said = [
        {key: value for key, value in entry.items() if key not in ("log_level", "via")}
        for entry in logs
        if str(entry["event"]).startswith("operator_")
    ]
    who = {"operator": OPERATOR_NAME}
    changed = [{**who, "task_type": OTHER_TASK, "changed": flag} for flag in (True, False)]
    assert said == [
        {"event": "operator_list", **who, "filters": f"owner={BOB}", "count": 1},
        {
            "event": "operator_cancel",
            **who,
            "operation_id": running.id,
            "owner": BOB,
            "state": "running",  # until its worker stops
            "attempt": 1,
            "cancel_requested": True,
        },
        *({"event": "operator_pause_task_type", **line} for line in changed),
        {"event": "operator_list_task_types", **who, "paused": 1},
        *({"event": "operator_resume_task_type", **line} for line in changed),
    ]


# ---- nobody else reaches it, and it reaches nothing else -------------------------------------

OPERATOR_CALLS: dict[str, Callable[[Services, Metadata], object]] = {
    "list": lambda s, md: s.operator.ListOperations(opb.ListOperationsRequest(), metadata=md),
    "get": lambda s, md: s.operator.GetOperation(
        opb.GetOperationRequest(operation_id="0" * 32), metadata=md
    ),
    "cancel": lambda s, md: s.operator.CancelOperation(
        opb.CancelOperationRequest(operation_id="0" * 32), metadata=md
    ),
    "retry": lambda s, md: s.operator.RetryOperation(
        opb.RetryOperationRequest(operation_id="0" * 32), metadata=md
    ),
    "pause": lambda s, md: s.operator.PauseTaskType(
        opb.PauseTaskTypeRequest(task_type="bench.noop"), metadata=md
    ),
    "resume": lambda s, md: s.operator.ResumeTaskType(
        opb.ResumeTaskTypeRequest(task_type="bench.noop"), metadata=md
    ),
    "task types": lambda s, md: s.operator.ListTaskTypes(opb.ListTaskTypesRequest(), metadata=md),
}


@pytest.mark.parametrize("role", [Role.GATEWAY, Role.WORKER, Role.PRODUCER])
def test_an_owner_credential_never_reaches_the_operator_scope(
    services: Services, ops: OpsClient, role: Role
) -> None:
    created = ops.create(ALICE, "k-guarded")
    for owner in (None, ALICE, BOB, "operator", "root"):
        md = metadata(role, owner, subject="operator")
        for name, call in OPERATOR_CALLS.items():
            failure = expect_failure(partial(call, services, md), DENIED)
            assert failure.error_code in ("operator_scope_required", "owner_scope_required"), name
    assert ops.get(ALICE, created.id).state == QUEUED


def test_the_operator_credential_is_only_the_operator_scope(
    services: Services, ops: OpsClient, operator_md: Metadata
) -> None:
    created = ops.create(ALICE, "k-operator-as-owner")
    with_owner = metadata(Role.OPERATOR, ALICE)
    for call in OPERATOR_CALLS.values():
        expect_failure(partial(call, services, with_owner), DENIED)
    expect_failure(
        lambda: ops.stub.GetOperation(
            pb.GetOperationRequest(operation_id=created.id), metadata=with_owner
        ),
        DENIED,
        "operator_scope_has_no_owner",
    )
    # Without x-owner-id it is not an owner, nor the worker's neutral scope.
    expect_failure(
        lambda: ops.stub.GetOperation(
            pb.GetOperationRequest(operation_id=created.id), metadata=operator_md
        ),
        DENIED,
        "owner_scope_required",
    )
    expect_failure(lambda: ops.claim(md=operator_md), DENIED, "neutral_scope_required")
    assert ops.get(ALICE, created.id).state == QUEUED


# ---- opsctl operations against the running service --------------------------------------------


def test_opsctl_operations_list_show_and_bulk_cancel(
    services: Services,
    ops: OpsClient,
    clock: ManualClock,
    opsctl: Callable[..., tuple[int, str, str]],
) -> None:
    alices = ops.create(ALICE, "k-cli-alice")
    bobs = []
    job = create_job(services.workspace, BOB)  # a real one: the operator retries an analysis
    for n in range(3):
        clock.advance(1)  # one order, newest first, whatever the ids drawn
        bobs.append(ops.create(BOB, f"k-cli-bob-{n}", subject_id=job))

    code, out, _ = opsctl("list", "--json", "--as", OPERATOR_NAME)
    assert code == 0
    listed = json.loads(out)
    assert [row["id"] for row in listed] == [op.id for op in [*reversed(bobs), alices]]
    assert {row["owner_id"] for row in listed} == {ALICE, BOB}
    assert listed[0]["state"] == "queued"
    assert listed[0]["failure_message"] is None

    code, out, _ = opsctl("show", alices.id, "--json")
    assert code == 0
    assert json.loads(out)["owner_id"] == ALICE
    assert json.loads(out)["not_before"] is None
    due = clock() + timedelta(hours=2)
    scheduled = ops.create_raw(ALICE, ops.create_request("k-cli-later", not_before=due))
    code, out, _ = opsctl("show", scheduled.operation.id)
    assert code == 0
    assert f"not_before        {due.isoformat()}" in out
    code, out, _ = opsctl("list", "--owner", BOB, "--limit", "2")
    assert code == 0
    assert out.splitlines()[0].split()[:2] == ["ID", "OWNER"]
    assert len(out.splitlines()) == 3

    # By filter: the plan first, nothing done without --yes.
    code, out, err = opsctl("cancel", "--owner", BOB, "--state", "queued")
    assert code == EXIT_NOT_CONFIRMED
    assert "--yes" in err
    assert all(op.id in out for op in bobs)
    assert alices.id not in out
    assert {ops.get(BOB, op.id).state for op in bobs} == {QUEUED}

    code, out, _ = opsctl("cancel", "--owner", BOB, "--state", "queued", "--yes", "--json")
    assert code == 0
    assert sorted(row["id"] for row in json.loads(out)) == sorted(op.id for op in bobs)
    assert {ops.get(BOB, op.id).state for op in bobs} == {CANCELLED}
    assert ops.get(ALICE, alices.id).state == QUEUED

    code, out, _ = opsctl("retry", bobs[0].id)
    assert code == 0
    assert ops.get(BOB, bobs[0].id).state == QUEUED

    code, _, err = opsctl("show", "0" * 32)
    assert code == 5
    assert "not_found" in err
    code, _, err = opsctl("cancel")
    assert code == 2
    assert "filter" in err
    code, _, err = opsctl("cancel", alices.id, "--owner", ALICE)
    assert code == 2
