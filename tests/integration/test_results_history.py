"""Results as history (issue 39, point 4), through real servers on both engines.

Each finished analysis is its own result: a re-run adds one beside the earlier ones
instead of overwriting it; each names the CV and the model it was made with, as they
were; ``GetOperationNote`` reads a past operation's own result, for its owner only;
a subject keeps its newest ``RESULTS_KEPT_PER_SUBJECT`` results.
"""

from __future__ import annotations

import json
from typing import Any

import grpc
import pytest
from sqlalchemy import select

from durable_ops.api.workspace.v1 import workspace_pb2 as wpb
from durable_ops.model import bounds
from durable_ops.model.scope import Role
from durable_ops.storage.schema import AiWorkspaceNote
from tests.support.clock import ManualClock
from tests.support.gateway import Claimed, claim, complete
from tests.support.grpc_services import Services, metadata
from tests.support.operations_client import expect_failure
from tests.support.stored import rows
from tests.support.workspace_client import create_cv, create_job, entitle, snapshot_request

SNAPSHOT = "strategy.snapshot"
NOT_FOUND = grpc.StatusCode.NOT_FOUND


def _run(
    services: Services,
    clock: ManualClock,
    owner: str,
    job: str,
    cv: str = "",
    *,
    score: int,
    model: str = "qwen2.5-3b",
) -> Claimed:
    """One analysis from admission to its end, its result published with its model."""
    clock.advance(1)  # each run later than the last, as on any real clock
    services.admission.Admit(
        snapshot_request(job, cv, key=f"run-{score}"), metadata=metadata(Role.GATEWAY, owner)
    )
    claimed = claim(services, [SNAPSHOT])
    reply = _publish(services, claimed, {"fit_score": score}, model=model)
    assert reply.published
    complete(services, claimed)
    return claimed


def _publish(services: Services, claimed: Claimed, body: Any, *, model: str) -> Any:
    request = wpb.PublishNoteRequest(
        kind=SNAPSHOT,
        subject_type="job",
        subject_id=claimed.subject_id,
        operation_id=claimed.operation_id,
        lease_token=claimed.lease_token,
        body_json=json.dumps(body),
        provider="127.0.0.1",
        model=model,
        route="local",
    )
    return services.workspace.PublishNote(request, metadata=metadata(Role.WORKER, claimed.owner))


def _newest(services: Services, owner: str, job: str) -> Any:
    return services.workspace.GetNote(
        wpb.GetNoteRequest(kind=SNAPSHOT, subject_type="job", subject_id=job),
        metadata=metadata(Role.GATEWAY, owner),
    )


def _of_operation(services: Services, owner: str, operation_id: str) -> Any:
    return services.workspace.GetOperationNote(
        wpb.GetOperationNoteRequest(operation_id=operation_id),
        metadata=metadata(Role.GATEWAY, owner),
    )


def _score(note: Any) -> int:
    return int(json.loads(note.body_json)["fit_score"])


def test_a_rerun_adds_a_result_and_each_names_its_cv_and_model(
    services: Services, clock: ManualClock
) -> None:
    entitle(services.db, "alice")
    job = create_job(services.workspace, "alice")
    cv = create_cv(services.workspace, "alice")
    first = _run(services, clock, "alice", job, cv, score=21, model="qwen2.5-3b")
    second = _run(services, clock, "alice", job, score=64, model="dev-heuristic")

    newest = _newest(services, "alice", job)
    assert (_score(newest), newest.operation_id) == (64, second.operation_id)
    assert (newest.context_ref, newest.context_name, newest.model) == ("", "", "dev-heuristic")
    earlier = _of_operation(services, "alice", first.operation_id)
    assert _score(earlier) == 21  # kept, not overwritten
    assert (earlier.context_ref, earlier.context_name) == (cv, "cv.txt")
    assert (earlier.model, earlier.route) == ("qwen2.5-3b", "local")
    assert earlier.created_at.ToDatetime() < newest.created_at.ToDatetime()


def test_a_second_publish_of_the_same_operation_returns_its_result(
    services: Services, clock: ManualClock
) -> None:
    entitle(services.db, "alice")
    job = create_job(services.workspace, "alice")
    services.admission.Admit(
        snapshot_request(job, key="once"), metadata=metadata(Role.GATEWAY, "alice")
    )
    claimed = claim(services, [SNAPSHOT])
    assert _publish(services, claimed, {"fit_score": 1}, model="m").published
    again = _publish(services, claimed, {"fit_score": 2}, model="m")
    assert (again.published, _score(again.note)) == (False, 1)
    assert len(rows(services.db, select(AiWorkspaceNote.id))) == 1


def test_a_past_operations_result_is_its_owners_alone(
    services: Services, clock: ManualClock
) -> None:
    entitle(services.db, "alice")
    job = create_job(services.workspace, "alice")
    run = _run(services, clock, "alice", job, score=40)
    assert _score(_of_operation(services, "alice", run.operation_id)) == 40
    for owner, operation_id in (
        ("bob", run.operation_id),  # another owner's: like a missing one
        ("alice", "f" * 32),
        ("alice", ""),
        ("alice", "x" * (bounds.ID_MAX + 1)),
    ):
        expect_failure(
            lambda: _of_operation(services, owner, operation_id),  # noqa: B023
            NOT_FOUND,
            "result_not_found",
        )


@pytest.mark.slow
def test_a_subject_keeps_its_newest_results_only(services: Services, clock: ManualClock) -> None:
    entitle(services.db, "alice")
    job = create_job(services.workspace, "alice")
    other = create_job(services.workspace, "alice")
    kept_elsewhere = _run(services, clock, "alice", other, score=100)
    runs = [
        _run(services, clock, "alice", job, score=score)
        for score in range(bounds.RESULTS_KEPT_PER_SUBJECT + 1)
    ]
    expect_failure(
        lambda: _of_operation(services, "alice", runs[0].operation_id),
        NOT_FOUND,
        "result_not_found",
    )
    assert _score(_of_operation(services, "alice", runs[1].operation_id)) == 1
    assert _score(_newest(services, "alice", job)) == bounds.RESULTS_KEPT_PER_SUBJECT
    # Another subject's results are not counted against this one.
    assert _score(_of_operation(services, "alice", kept_elsewhere.operation_id)) == 100
    stored = rows(services.db, select(AiWorkspaceNote.subject_id))
    assert len(stored) == bounds.RESULTS_KEPT_PER_SUBJECT + 1
