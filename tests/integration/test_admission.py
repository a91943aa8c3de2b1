"""AI admission over gRPC on both engines: entitlement, capacity, reuse, privacy of rows."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta

import grpc
import pytest
from sqlalchemy import func, select

from durable_ops.api.ai_admission.v1 import ai_admission_pb2 as pb
from durable_ops.api.operations.v1 import operations_pb2 as ops_pb
from durable_ops.api.workspace.v1 import workspace_pb2 as workspace_pb
from durable_ops.model.admission import Limits
from durable_ops.model.errors import KEY_USED_FOR_ANOTHER_REQUEST
from durable_ops.model.scope import Role
from durable_ops.storage import capacity
from durable_ops.storage.schema import UserOperation
from durable_ops.wire.operations import from_timestamp
from tests.support.clock import ManualClock
from tests.support.grpc_services import Services, metadata, running_services
from tests.support.operations_client import OpsClient
from tests.support.stored import operation, scalar
from tests.support.workspace_client import (
    create_cv,
    create_job,
    entitle,
    snapshot_request,
)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def services(db_url: str, clock: ManualClock) -> Iterator[Services]:
    with running_services(db_url, clock, Limits(per_user=2, global_=3)) as running:
        yield running


def _admit(services: Services, owner: str, request: pb.AdmitRequest) -> pb.AdmitResponse:
    response: pb.AdmitResponse = services.admission.Admit(
        request, metadata=metadata(Role.GATEWAY, owner)
    )
    return response


def _refusal(services: Services, owner: str, request: pb.AdmitRequest) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        _admit(services, owner, request)
    return caught.value


def _code(error: grpc.RpcError) -> str:
    return _trailer(error, "x-error-code")


def _trailer(error: grpc.RpcError, key: str) -> str:
    return str({item.key: item.value for item in error.trailing_metadata() or ()}[key])


def test_admit_creates_a_queued_operation_with_a_status_url(services: Services) -> None:
    entitle(services.db, "alice")
    job = create_job(services.workspace, "alice")
    cv = create_cv(services.workspace, "alice")
    response = _admit(services, "alice", snapshot_request(job, cv))
    assert response.reused is False
    assert response.status_url == f"/api/operations/{response.operation.id}"
    assert response.operation.state == ops_pb.OPERATION_STATE_QUEUED
    assert (response.operation.subject.type, response.operation.subject.id) == ("job", job)
    row = operation(services.db, response.operation.id)
    assert row is not None
    assert (row.owner_user_id, row.context_ref, row.privacy) == ("alice", cv, "local_only")
    assert row.deadline_at is not None
    assert row.time_budget_seconds == 1800


@pytest.mark.parametrize(
    ("plan", "ai_enabled", "code"),
    [
        ("free", True, "not_entitled"),
        ("pro", False, "ai_disabled"),
        ("free", False, "not_entitled"),
    ],
)
def test_entitlement_is_required(
    services: Services, plan: str, ai_enabled: bool, code: str
) -> None:
    if plan == "free" and ai_enabled:
        # AI cannot be switched on on Free; it stays on when an operator takes Pro away.
        entitle(services.db, "alice")
    entitle(services.db, "alice", plan=plan, ai_enabled=ai_enabled)
    job = create_job(services.workspace, "alice")
    for key in ("", "click-1"):  # a start sent with an Idempotency-Key is no exception
        error = _refusal(services, "alice", snapshot_request(job, key=key))
        assert error.code() == grpc.StatusCode.PERMISSION_DENIED
        assert _code(error) == code


@pytest.mark.parametrize("revoke", ["plan", "ai_enabled"])
def test_revoking_between_two_admits_refuses_the_second(services: Services, revoke: str) -> None:
    entitle(services.db, "alice")
    first, second = create_job(services.workspace, "alice"), create_job(services.workspace, "alice")
    _admit(services, "alice", snapshot_request(first))
    if revoke == "plan":
        entitle(services.db, "alice", plan="free")
    else:
        services.workspace.UpdateAiSettings(
            workspace_pb.UpdateAiSettingsRequest(ai_enabled=False),
            metadata=metadata(Role.GATEWAY, "alice"),
        )
    error = _refusal(services, "alice", snapshot_request(second))
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED


def _update_ai_settings(
    services: Services, owner: str, request: workspace_pb.UpdateAiSettingsRequest
) -> workspace_pb.AiSettings:
    settings: workspace_pb.AiSettings = services.workspace.UpdateAiSettings(
        request, metadata=metadata(Role.GATEWAY, owner)
    )
    return settings


def _settings_refusal(
    services: Services, owner: str, request: workspace_pb.UpdateAiSettingsRequest
) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        _update_ai_settings(services, owner, request)
    return caught.value


def _ai_settings(services: Services, owner: str) -> workspace_pb.AiSettings:
    settings: workspace_pb.AiSettings = services.workspace.GetAiSettings(
        workspace_pb.GetAiSettingsRequest(), metadata=metadata(Role.GATEWAY, owner)
    )
    return settings


def test_ai_cannot_be_switched_on_on_the_free_plan(services: Services) -> None:
    switch_on = workspace_pb.UpdateAiSettingsRequest(ai_enabled=True, privacy="external_allowed")
    error = _settings_refusal(services, "alice", switch_on)
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    assert _code(error) == "plan_required"
    assert error.details() == (
        "AI analyses need the Pro plan, and this account is on the Free plan; "
        "an operator grants Pro with `opsctl users set-plan alice pro`."
    )
    # Refused as a whole: the privacy choice sent with it is not saved either.
    settings = _ai_settings(services, "alice")
    assert (settings.ai_enabled, settings.privacy, settings.plan) == (False, "local_only", "free")
    job = create_job(services.workspace, "alice")
    assert _code(_refusal(services, "alice", snapshot_request(job))) == "not_entitled"


def test_on_the_free_plan_ai_can_still_be_switched_off_and_privacy_changed(
    services: Services,
) -> None:
    entitle(services.db, "alice")
    entitle(services.db, "alice", plan="free")  # Pro taken away: the switch stays as it was
    _update_ai_settings(
        services, "alice", workspace_pb.UpdateAiSettingsRequest(privacy="external_allowed")
    )
    _update_ai_settings(services, "alice", workspace_pb.UpdateAiSettingsRequest(ai_enabled=False))
    settings = _ai_settings(services, "alice")
    assert (settings.ai_enabled, settings.privacy, settings.plan) == (
        False,
        "external_allowed",
        "free",
    )
    switch_on = workspace_pb.UpdateAiSettingsRequest(ai_enabled=True)
    assert _code(_settings_refusal(services, "alice", switch_on)) == "plan_required"


def test_with_pro_granted_first_ai_can_be_switched_on(services: Services) -> None:
    entitle(services.db, "alice", plan="pro", ai_enabled=False)  # `opsctl users set-plan`
    switch_on = workspace_pb.UpdateAiSettingsRequest(ai_enabled=True)
    settings = _update_ai_settings(services, "alice", switch_on)
    assert (settings.ai_enabled, settings.plan) == (True, "pro")
    job = create_job(services.workspace, "alice")
    assert _admit(services, "alice", snapshot_request(job)).reused is False


def test_global_switch_off_is_unavailable(services: Services) -> None:
    entitle(services.db, "alice")
    job = create_job(services.workspace, "alice")
    services.db.run(lambda tx: capacity.set_ai_enabled(tx, False, services.clock()), owner_id=None)
    error = _refusal(services, "alice", snapshot_request(job))
    assert error.code() == grpc.StatusCode.UNAVAILABLE
    assert _code(error) == "ai_unavailable"


def test_another_owners_job_or_cv_is_not_found(services: Services) -> None:
    entitle(services.db, "alice")
    entitle(services.db, "bob")
    bobs_job = create_job(services.workspace, "bob")
    bobs_cv = create_cv(services.workspace, "bob")
    alices_job = create_job(services.workspace, "alice")
    for request in (snapshot_request(bobs_job), snapshot_request(alices_job, bobs_cv)):
        error = _refusal(services, "alice", request)
        assert error.code() == grpc.StatusCode.NOT_FOUND
    missing = _refusal(services, "alice", snapshot_request("0" * 32))
    assert missing.details() == _refusal(services, "alice", snapshot_request(bobs_job)).details()


def test_an_active_operation_for_the_same_subject_is_reused(services: Services) -> None:
    entitle(services.db, "alice")
    job = create_job(services.workspace, "alice")
    first = _admit(services, "alice", snapshot_request(job))
    again = _admit(services, "alice", snapshot_request(job))
    assert again.reused is True
    assert again.operation.id == first.operation.id


def test_a_double_click_yields_one_operation(services: Services) -> None:
    entitle(services.db, "alice")
    job = create_job(services.workspace, "alice")
    barrier = threading.Barrier(8)

    def click(_: int) -> str:
        barrier.wait()
        return str(_admit(services, "alice", snapshot_request(job)).operation.id)

    with ThreadPoolExecutor(8) as pool:
        ids = set(pool.map(click, range(8)))
    assert len(ids) == 1
    assert scalar(services.db, select(func.count()).select_from(UserOperation)) == 1


def test_idempotency_key_returns_the_same_operation_and_guards_its_subject(
    services: Services,
) -> None:
    entitle(services.db, "alice")
    job, other = create_job(services.workspace, "alice"), create_job(services.workspace, "alice")
    first = _admit(services, "alice", snapshot_request(job, key="click-1"))
    assert _admit(services, "alice", snapshot_request(job, key="click-1")).operation.id == (
        first.operation.id
    )
    error = _refusal(services, "alice", snapshot_request(other, key="click-1"))
    assert error.code() == grpc.StatusCode.ALREADY_EXISTS


def test_an_idempotency_key_sent_again_with_another_cv_is_another_request(
    services: Services,
) -> None:
    """The key's first request named its CV: a replay naming another CV, or none, is not
    that request, and answering it with the first analysis would show the user an analysis
    of a CV they did not ask about (the same job, so the subject alone does not tell)."""
    entitle(services.db, "alice")
    job = create_job(services.workspace, "alice")
    cv, other_cv = create_cv(services.workspace, "alice"), create_cv(services.workspace, "alice")
    first = _admit(services, "alice", snapshot_request(job, cv, key="click-1"))
    replay = _admit(services, "alice", snapshot_request(job, cv, key="click-1"))
    assert (replay.operation.id, replay.reused) == (first.operation.id, True)
    for another in (
        snapshot_request(job, other_cv, key="click-1"),
        snapshot_request(job, key="click-1"),
    ):
        refused = _refusal(services, "alice", another)
        assert refused.code() == grpc.StatusCode.ALREADY_EXISTS
        assert _code(refused) == "idempotency_conflict"


def _at(request: pb.AdmitRequest, when: datetime) -> pb.AdmitRequest:
    request.not_before.FromDatetime(when)
    return request


def _waits_until(response: pb.AdmitResponse) -> datetime | None:
    return from_timestamp(response.not_before) if response.HasField("not_before") else None


def test_a_reused_analysis_says_when_it_is_due(services: Services, clock: ManualClock) -> None:
    """A start that names no time, or the same time, gets the subject's active analysis and
    is told when that one runs: later (its not_before) or now (unset)."""
    entitle(services.db, "alice")
    job, other = create_job(services.workspace, "alice"), create_job(services.workspace, "alice")
    later = clock() + timedelta(hours=3)
    scheduled = _admit(services, "alice", _at(snapshot_request(job), later))
    assert (scheduled.reused, _waits_until(scheduled)) == (False, later)
    for again in (snapshot_request(job), _at(snapshot_request(job), later)):
        reused = _admit(services, "alice", again)
        assert (reused.operation.id, reused.reused) == (scheduled.operation.id, True)
        assert _waits_until(reused) == later

    now = _admit(services, "alice", snapshot_request(other))
    assert (now.reused, _waits_until(now)) == (False, None)
    # A time already past means now: the same as the active one's.
    for again in (
        snapshot_request(other),
        _at(snapshot_request(other), clock() - timedelta(days=1)),
    ):
        reused = _admit(services, "alice", again)
        assert (reused.operation.id, reused.reused, _waits_until(reused)) == (
            now.operation.id,
            True,
            None,
        )

    clock.advance(3 * 3600)
    services.sweep()  # its time came: it is due now
    due = _admit(services, "alice", snapshot_request(job))
    assert (due.operation.id, due.reused, _waits_until(due)) == (scheduled.operation.id, True, None)


def test_a_start_naming_another_time_learns_when_the_active_analysis_runs(
    services: Services, clock: ManualClock
) -> None:
    """It was answered with the active analysis and nothing said the time it named was not
    kept: the user believed it would run when asked. The answer now gives the time it runs
    (SPEC: an active one is reused, 202, the same id)."""
    entitle(services.db, "alice")
    job, other = create_job(services.workspace, "alice"), create_job(services.workspace, "alice")
    later = (clock() + timedelta(hours=3)).replace(microsecond=0)
    scheduled = _admit(services, "alice", _at(snapshot_request(job), later))
    for another in (later + timedelta(minutes=1), clock() - timedelta(minutes=1)):
        reused = _admit(services, "alice", _at(snapshot_request(job, key="another"), another))
        assert (reused.operation.id, reused.reused) == (scheduled.operation.id, True)
        assert _waits_until(reused) == later

    now = _admit(services, "alice", snapshot_request(other))  # due now
    reused = _admit(services, "alice", _at(snapshot_request(other), later))
    assert (reused.operation.id, reused.reused, _waits_until(reused)) == (
        now.operation.id,
        True,
        None,
    )
    rows = scalar(services.db, select(func.count()).select_from(UserOperation))
    assert rows == 2  # nothing was made for the other times


def test_an_idempotency_key_sent_again_with_another_time_is_another_request(
    services: Services, clock: ManualClock
) -> None:
    """As the Operations service's fingerprint refuses it: the key's first request named
    when it runs, and a replay naming another time is not that request."""
    entitle(services.db, "alice")
    job, other = create_job(services.workspace, "alice"), create_job(services.workspace, "alice")
    later = clock() + timedelta(hours=1)
    first = _admit(services, "alice", _at(snapshot_request(job, key="k-1"), later))
    clock.advance(7200)  # a replay after its time still names the time it named then
    replay = _admit(services, "alice", _at(snapshot_request(job, key="k-1"), later))
    assert (replay.operation.id, replay.reused) == (first.operation.id, True)
    for another in (
        snapshot_request(job, key="k-1"),
        _at(snapshot_request(job, key="k-1"), clock()),
    ):
        refused = _refusal(services, "alice", another)
        assert _code(refused) == "idempotency_conflict"
        assert refused.details() == KEY_USED_FOR_ANOTHER_REQUEST

    plain = _admit(services, "alice", snapshot_request(other, key="k-2"))
    clock.advance(60)
    # A time before its creation meant its creation; one after it is another time.
    before = _at(snapshot_request(other, key="k-2"), clock() - timedelta(minutes=5))
    assert _admit(services, "alice", before).operation.id == plain.operation.id
    refused = _refusal(services, "alice", _at(snapshot_request(other, key="k-2"), clock()))
    assert _code(refused) == "idempotency_conflict"


def test_capacity_per_user_and_global(services: Services) -> None:
    for owner in ("alice", "bob"):
        entitle(services.db, owner)
    alice_jobs = [create_job(services.workspace, "alice") for _ in range(3)]
    bob_jobs = [create_job(services.workspace, "bob") for _ in range(2)]
    _admit(services, "alice", snapshot_request(alice_jobs[0]))
    _admit(services, "alice", snapshot_request(alice_jobs[1]))
    per_user = _refusal(services, "alice", snapshot_request(alice_jobs[2]))
    assert per_user.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert int(_trailer(per_user, "x-retry-after")) > 0
    _admit(services, "bob", snapshot_request(bob_jobs[0]))  # global limit 3 reached
    everyone = _refusal(services, "bob", snapshot_request(bob_jobs[1]))
    assert everyone.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_operations_of_other_task_types_take_no_ai_capacity(services: Services) -> None:
    """A producer's own operations (a report it renders) are not analyses: they take
    nothing of the AI limits, neither the owner's nor everyone's, though they share the
    operations table the limits are counted on."""
    entitle(services.db, "alice")
    ops = OpsClient(services)
    producer = ops.md(Role.PRODUCER, "alice")
    for n in range(3):  # past the owner's limit of 2 and the global one of 3
        request = ops.create_request(f"render-{n}", task_type="report.render")
        assert ops.stub.CreateOperation(request, metadata=producer).created
    job = create_job(services.workspace, "alice")
    assert _admit(services, "alice", snapshot_request(job)).reused is False


def test_analyses_scheduled_for_later_take_no_capacity_until_their_time(
    services: Services, clock: ManualClock
) -> None:
    """They counted from the moment they were made: two analyses scheduled for the end of
    the month refused the user's analysis of today, and a few users' could refuse everyone."""
    for owner in ("alice", "bob"):
        entitle(services.db, owner)
    later = clock() + timedelta(days=20)

    def scheduled(owner: str) -> pb.AdmitRequest:
        request = snapshot_request(create_job(services.workspace, owner))
        request.not_before.FromDatetime(later)
        return request

    for owner in ("alice", "alice", "bob", "bob"):  # more than the global limit of 3
        _admit(services, owner, scheduled(owner))
    _admit(services, "alice", snapshot_request(create_job(services.workspace, "alice")))
    clock.advance(20 * 24 * 3600)
    services.sweep()  # their time came: they count now
    refused = _refusal(services, "bob", snapshot_request(create_job(services.workspace, "bob")))
    assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_cancelled_operations_free_capacity(services: Services) -> None:
    entitle(services.db, "alice")
    jobs = [create_job(services.workspace, "alice") for _ in range(3)]
    first = _admit(services, "alice", snapshot_request(jobs[0]))
    _admit(services, "alice", snapshot_request(jobs[1]))
    services.operations.CancelOperation(
        ops_pb.CancelOperationRequest(operation_id=first.operation.id),
        metadata=metadata(Role.GATEWAY, "alice"),
    )
    assert _admit(services, "alice", snapshot_request(jobs[2])).reused is False


def test_the_operation_row_holds_no_job_cv_or_prompt_text(services: Services) -> None:
    entitle(services.db, "alice")
    job = create_job(services.workspace, "alice", description="UNIQUE-JOB-MARKER kubernetes")
    cv = create_cv(services.workspace, "alice", text="UNIQUE-CV-MARKER rust")
    response = _admit(services, "alice", snapshot_request(job, cv))
    row = operation(services.db, response.operation.id)
    assert row is not None
    values = [str(getattr(row, column.key)) for column in UserOperation.__table__.columns]
    text = " ".join(values)
    assert "UNIQUE-JOB-MARKER" not in text
    assert "UNIQUE-CV-MARKER" not in text
    assert "Engineer" not in text
    assert "Acme" not in text


def test_lookup_is_cache_only(services: Services) -> None:
    entitle(services.db, "alice")
    job = create_job(services.workspace, "alice")
    lookup = pb.LookupRequest(task_type="strategy.snapshot", subject_id=job)
    before = services.admission.Lookup(lookup, metadata=metadata(Role.GATEWAY, "alice"))
    assert not before.HasField("operation")
    assert scalar(services.db, select(func.count()).select_from(UserOperation)) == 0
    admitted = _admit(services, "alice", snapshot_request(job))
    after = services.admission.Lookup(lookup, metadata=metadata(Role.GATEWAY, "alice"))
    assert after.operation.id == admitted.operation.id
    elsewhere = services.admission.Lookup(lookup, metadata=metadata(Role.GATEWAY, "bob"))
    assert not elsewhere.HasField("operation")
