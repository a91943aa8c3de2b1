"""Daily token budgets enforced at admission (issue 36, point 3; ADR 0041), on both engines.

Admission reserves an analysis's expected tokens on the owner's day in its reserving
transaction; the settlement that ends an attempt spends the attempt's actual count and
the operation's end releases the rest, so a day's ``spent`` is the sum over its
attempts. Past a budget, 429 ``budget_exhausted`` with ``Retry-After`` to 00:00 UTC and
the page's sentence. Concurrent admissions through two replicas never pass a budget.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, date, datetime, timedelta
from functools import partial
from typing import Any

import grpc
import httpx
import pytest
from sqlalchemy import func, select

from durable_ops import cli
from durable_ops.api.ai_admission.v1 import ai_admission_pb2 as pb
from durable_ops.api.operations.v1 import operations_pb2 as ops_pb
from durable_ops.api.operator.v1 import operator_pb2 as opb
from durable_ops.api.workspace.v1 import workspace_pb2
from durable_ops.gateway import dto
from durable_ops.model import budgets, subjects
from durable_ops.model.admission import Limits
from durable_ops.model.retention import RetentionPolicy
from durable_ops.model.scope import Role
from durable_ops.model.tasks import STRATEGY_SNAPSHOT
from durable_ops.operations import pruner
from durable_ops.storage import budgets as budget_store
from durable_ops.storage.schema import OperationAttempt, OwnerTokenBudget
from tests.integration.test_attempt_usage import LOCAL, _settle, _stored_sums_agree, _used
from tests.integration.test_gateway_workspace_ai import CV, JOB, _problem
from tests.support.clock import ManualClock
from tests.support.gateway import bearer, gateway_client, make_app, run
from tests.support.grpc_services import Services, metadata, running_services
from tests.support.operations_client import (
    CANCELLED,
    FAILED,
    QUEUED,
    SUCCEEDED,
    WAITING_FOR_RETRY,
    Lease,
    Metadata,
    OpsClient,
)
from tests.support.stored import operation, scalar
from tests.support.workspace_client import (
    CV_TEXT,
    JOB_TEXT,
    create_cv,
    create_job,
    entitle,
    snapshot_request,
)

NOON = datetime.now(UTC).replace(hour=12, minute=0, second=0, microsecond=0)
SNAPSHOT = ("strategy.snapshot",)
LEASE_SECONDS = 5
ROOMY = Limits(per_user=20, global_=50)
# What a snapshot of the helpers' job (and CV) is expected to cost.
JOB_TOKENS = budgets.input_tokens(
    subjects.JOB, {"title": "Engineer", "company": "Acme", "description": JOB_TEXT}
)
EXPECTED = budgets.expected_tokens(
    JOB_TOKENS + budgets.input_tokens(subjects.CV, {"text": CV_TEXT})
)
ALONE = budgets.expected_tokens(JOB_TOKENS)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(NOON)


@pytest.fixture
def services(db_url: str, clock: ManualClock) -> Iterator[Services]:
    with running_services(db_url, clock, ROOMY) as running:
        yield running


def _day(services: Services, owner: str, day: date | None = None) -> tuple[int, int]:
    """(reserved, spent) of the owner's day, as stored; (0, 0) without a row."""
    found = services.db.run(
        lambda tx: budget_store.day_use(tx, day or NOON.date()), owner_id=owner, write=False
    )
    return found.reserved, found.spent


def _spent_by_attempts(services: Services, owner: str) -> int:
    attempt = OperationAttempt
    summed = select(
        func.coalesce(func.sum(attempt.prompt_tokens + attempt.completion_tokens), 0)
    ).where(attempt.owner_user_id == owner)
    return int(scalar(services.db, summed) or 0)


def _set_budget(services: Services, owner: str, tokens: int | None) -> None:
    services.db.run(
        lambda tx: budget_store.set_override(tx, tokens, set_by="test", now=NOON), owner_id=owner
    )


def _admit(services: Services, owner: str, cv: bool = True) -> pb.AdmitResponse:
    """A snapshot of a new job of ``owner``'s (and a new CV of theirs)."""
    job = create_job(services.workspace, owner)
    context = create_cv(services.workspace, owner) if cv else ""
    response: pb.AdmitResponse = services.admission.Admit(
        snapshot_request(job, context), metadata=metadata(Role.GATEWAY, owner)
    )
    return response


def _trailers(error: grpc.RpcError) -> dict[str, str]:
    return {item.key: str(item.value) for item in error.trailing_metadata() or ()}


def _refusal(call: Callable[[], object]) -> tuple[str, str | None, str]:
    """(error code, Retry-After seconds or None without one, message) of a refused call."""
    with pytest.raises(grpc.RpcError) as caught:
        call()
    trailers = _trailers(caught.value)
    return (
        str(trailers["x-error-code"]),
        trailers.get("x-retry-after"),
        str(caught.value.details()),
    )


def test_the_reservation_is_settled_with_the_actual_count_and_released_at_the_end(
    services: Services, ops: OpsClient
) -> None:
    entitle(services.db, "alice")
    admitted = _admit(services, "alice").operation
    row = operation(services.db, admitted.id)
    assert row is not None
    assert (row.budget_day, row.reserved_tokens) == (NOON.date(), EXPECTED)
    assert _day(services, "alice") == (EXPECTED, 0)

    lease = ops.claim_one(SNAPSHOT)
    done = _settle(
        ops, lease, _used(316, 271, 900), ops_pb.CompleteOperationRequest(provenance=LOCAL)
    )
    assert done == SUCCEEDED
    # The actual count is spent, the rest of the reservation given back.
    assert _day(services, "alice") == (0, 316 + 271)
    assert _spent_by_attempts(services, "alice") == 316 + 271
    row = operation(services.db, admitted.id)
    assert row is not None
    assert row.reserved_tokens == 0


def test_a_retried_attempt_counts_and_a_killed_one_costs_nothing(
    services: Services, ops: OpsClient, clock: ManualClock
) -> None:
    entitle(services.db, "alice")
    admitted = _admit(services, "alice").operation

    first = ops.claim_one(SNAPSHOT, LEASE_SECONDS)
    failed = _settle(
        ops,
        first,
        _used(300, 40, 800),
        ops_pb.FailOperationRequest(retryable=True, failure_code="invalid_model_output"),
    )
    assert failed == WAITING_FOR_RETRY
    # Drawn from the reservation, which still covers the next attempt's rest.
    assert _day(services, "alice") == (EXPECTED - 340, 340)

    def retry_due() -> None:
        clock.advance(60)
        assert services.sweep().promoted == 1

    retry_due()
    ops.claim_one(SNAPSHOT, LEASE_SECONDS)  # the worker dies before the model answers
    clock.advance(LEASE_SECONDS + 1)
    services.sweep()
    assert ops.get("alice", admitted.id).state == WAITING_FOR_RETRY
    assert _day(services, "alice") == (EXPECTED - 340, 340)  # it cost nothing

    retry_due()
    third = ops.claim_one(SNAPSHOT, LEASE_SECONDS)
    done = _settle(
        ops, third, _used(300, 120, 900), ops_pb.CompleteOperationRequest(provenance=LOCAL)
    )
    assert done == SUCCEEDED
    assert _day(services, "alice") == (0, 340 + 420)
    assert _spent_by_attempts(services, "alice") == 340 + 420


def test_a_manual_retry_the_next_day_spends_from_that_day(
    services: Services, ops: OpsClient, clock: ManualClock
) -> None:
    entitle(services.db, "frank")
    admitted = _admit(services, "frank").operation
    first = ops.claim_one(SNAPSHOT, LEASE_SECONDS)
    failed = _settle(
        ops,
        first,
        _used(100, 10, 500),
        ops_pb.FailOperationRequest(retryable=False, failure_code="invalid_model_output"),
    )
    assert failed == FAILED
    assert _day(services, "frank") == (0, 110)

    clock.advance(24 * 3600)
    tomorrow = (NOON + timedelta(days=1)).date()
    _retry(services, "frank", admitted.id)
    assert _day(services, "frank", tomorrow) == (EXPECTED, 0)  # admitted again, that day
    again = ops.claim_one(SNAPSHOT, LEASE_SECONDS)
    done = _settle(
        ops, again, _used(200, 20, 700), ops_pb.CompleteOperationRequest(provenance=LOCAL)
    )
    assert done == SUCCEEDED
    assert _day(services, "frank") == (0, 110)  # yesterday's stays as it was
    assert _day(services, "frank", tomorrow) == (0, 220)
    assert _spent_by_attempts(services, "frank") == 110 + 220


def _retry(services: Services, owner: str, operation_id: str) -> pb.AdmitResponse:
    response: pb.AdmitResponse = services.admission.Retry(
        pb.RetryRequest(operation_id=operation_id), metadata=metadata(Role.GATEWAY, owner)
    )
    return response


def test_a_manual_retry_is_admitted_again_past_the_budget_capacity_or_ai_off_it_is_refused(
    db_url: str, clock: ManualClock
) -> None:
    with running_services(db_url, clock, Limits(per_user=1, global_=50)) as services:
        ops = OpsClient(services)
        entitle(services.db, "gina")
        admitted = _admit(services, "gina").operation
        ops.cancel("gina", admitted.id)
        assert _day(services, "gina") == (0, 0)

        async def scenario() -> None:
            path = f"/api/operations/{admitted.id}/retry"
            async with gateway_client(make_app(services.target)) as client:
                _set_budget(services, "gina", EXPECTED - 1)
                over = await client.post(path, headers=bearer("gina"))
                _problem(over, 429, "budget_exhausted")
                assert "retry-after" not in over.headers  # too small a budget: raise it
                _set_budget(services, "gina", None)

                busy = _admit(services, "gina").operation  # the one analysis gina may run
                _problem(await client.post(path, headers=bearer("gina")), 429, "capacity_exceeded")
                ops.cancel("gina", busy.id)

                entitle(services.db, "gina", ai_enabled=False)
                _problem(await client.post(path, headers=bearer("gina")), 403, "ai_disabled")
                entitle(services.db, "gina")

                # Refused, nothing moved: the operation stayed cancelled, nothing reserved.
                assert ops.get("gina", admitted.id).state == CANCELLED
                assert _day(services, "gina") == (0, 0)

                retried = await client.post(path, headers=bearer("gina"))
                assert retried.status_code == 200, retried.text
                assert retried.json()["state"] == "queued"

        run(scenario())
        row = operation(services.db, admitted.id)
        assert row is not None
        assert (row.budget_day, row.reserved_tokens) == (NOON.date(), EXPECTED)
        assert _day(services, "gina") == (EXPECTED, 0)


def test_a_scheduled_analysis_draws_on_the_budget_of_the_day_it_runs(
    services: Services, ops: OpsClient, clock: ManualClock
) -> None:
    entitle(services.db, "grace")
    _set_budget(services, "grace", EXPECTED + 600)  # one analysis a day
    tomorrow = NOON + timedelta(days=1)

    def scheduled() -> pb.AdmitResponse:
        request = snapshot_request(create_job(services.workspace, "grace"))
        request.not_before.FromDatetime(tomorrow)
        response: pb.AdmitResponse = services.admission.Admit(
            request, metadata=metadata(Role.GATEWAY, "grace")
        )
        return response

    admitted = scheduled().operation
    row = operation(services.db, admitted.id)
    assert row is not None
    assert (row.budget_day, row.reserved_tokens) == (tomorrow.date(), ALONE)
    assert _day(services, "grace") == (0, 0)  # today's budget is untouched
    assert _day(services, "grace", tomorrow.date()) == (ALONE, 0)
    _admit(services, "grace")  # so today's analysis is still admitted

    code, retry_after, message = _refusal(scheduled)  # tomorrow's budget is taken
    assert code == "budget_exhausted"
    assert tomorrow.date().isoformat() in message
    assert retry_after == str(36 * 3600)  # noon today to the end of tomorrow

    clock.advance(24 * 3600)
    services.sweep()  # its time came: in the claim's line
    lease = ops.claim_one(SNAPSHOT)
    assert lease.id == admitted.id
    _settle(ops, lease, _used(300, 200, 900), ops_pb.CompleteOperationRequest(provenance=LOCAL))
    assert _day(services, "grace", tomorrow.date()) == (0, 500)


def _scheduled_then_cancelled(services: Services, owner: str, runs_at: datetime) -> str:
    """What a user did: an analysis started over HTTP for ``runs_at``, then cancelled; its id."""

    async def scenario() -> str:
        async with gateway_client(make_app(services.target)) as client:
            headers = bearer(owner)
            job = await client.post("/api/jobs", json=JOB, headers=headers)
            started = await client.post(
                f"/api/jobs/{job.json()['id']}/strategy-snapshot",
                json={"not_before": dto.rfc3339(runs_at)},
                headers=headers,
            )
            assert started.status_code == 202, started.text
            operation_id = str(started.json()["operation_id"])
            cancelled = await client.post(f"/api/operations/{operation_id}/cancel", headers=headers)
            assert cancelled.json()["state"] == "cancelled", cancelled.text
            return operation_id

    return str(run(scenario()))


def _retried_over_http(services: Services, owner: str, operation_id: str) -> dict[str, Any]:
    async def scenario() -> dict[str, Any]:
        async with gateway_client(make_app(services.target)) as client:
            path = f"/api/operations/{operation_id}/retry"
            retried = await client.post(path, headers=bearer(owner))
            assert retried.status_code == 200, retried.text
            answer: dict[str, Any] = retried.json()
            return answer

    retried: dict[str, Any] = run(scenario())
    return retried


def test_a_retried_scheduled_analysis_keeps_its_time_and_its_day_and_runs_then(
    services: Services, ops: OpsClient, clock: ManualClock
) -> None:
    """Scheduled two days ahead, cancelled, retried an hour later: it still runs at its
    time, its deadline counts from then (it used to be the retry's time + 30 min, so it
    failed as deadline_exceeded before its time came), and its tokens are reserved on the
    budget of that day, not on today's."""
    entitle(services.db, "hana")
    runs_at = NOON + timedelta(days=2)
    operation_id = _scheduled_then_cancelled(services, "hana", runs_at)
    clock.advance(3600)
    retried = _retried_over_http(services, "hana", operation_id)
    assert retried["state"] == "queued"
    assert dto.parse_rfc3339(retried["not_before"]) == runs_at
    assert dto.parse_rfc3339(retried["deadline_at"]) == runs_at + STRATEGY_SNAPSHOT.time_budget
    row = operation(services.db, operation_id)
    assert row is not None
    assert (row.budget_day, row.reserved_tokens) == (runs_at.date(), ALONE)
    assert _day(services, "hana") == (0, 0)  # today's budget holds nothing for it
    assert _day(services, "hana", runs_at.date()) == (ALONE, 0)

    clock.advance(STRATEGY_SNAPSHOT.time_budget.total_seconds() + 60)  # past retry + budget
    services.sweep()
    assert ops.get("hana", operation_id).state == QUEUED  # not failed: its time is to come
    assert ops.claim(SNAPSHOT) is None  # nor run before it
    clock.advance((runs_at - clock()).total_seconds())
    assert services.sweep().let_in == 1
    lease = ops.claim_one(SNAPSHOT)
    assert lease.id == operation_id
    _settle(ops, lease, _used(300, 200, 900), ops_pb.CompleteOperationRequest(provenance=LOCAL))
    assert _day(services, "hana", runs_at.date()) == (0, 500)


def test_a_retry_after_its_scheduled_time_runs_now_on_todays_budget(
    services: Services, ops: OpsClient, clock: ManualClock
) -> None:
    entitle(services.db, "ivan")
    runs_at = NOON + timedelta(hours=1)
    operation_id = _scheduled_then_cancelled(services, "ivan", runs_at)
    clock.advance(2 * 24 * 3600)  # two days later, its time long past
    today = clock()
    retried = _retried_over_http(services, "ivan", operation_id)
    assert dto.parse_rfc3339(retried["deadline_at"]) == today + STRATEGY_SNAPSHOT.time_budget
    row = operation(services.db, operation_id)
    assert row is not None
    assert (row.budget_day, row.reserved_tokens) == (today.date(), ALONE)
    assert _day(services, "ivan", today.date()) == (ALONE, 0)
    assert _day(services, "ivan", runs_at.date()) == (0, 0)
    services.sweep()
    assert ops.claim_one(SNAPSHOT).id == operation_id


def test_an_operators_retry_of_a_scheduled_analysis_keeps_its_time_too(
    services: Services, ops: OpsClient, clock: ManualClock, operator_md: Metadata
) -> None:
    """The operator's retry is the owner's storage retry: the same schedule and deadline;
    it reserves nothing (ADR 41), and spends on the day it runs."""
    entitle(services.db, "jane")
    runs_at = NOON + timedelta(days=2)
    operation_id = _scheduled_then_cancelled(services, "jane", runs_at)
    clock.advance(3600)
    retried: opb.OperatorOperation = services.operator.RetryOperation(
        opb.RetryOperationRequest(operation_id=operation_id), metadata=operator_md
    )
    assert retried.operation.state == QUEUED
    deadline = retried.operation.deadline_at.ToDatetime(tzinfo=UTC)
    assert deadline == runs_at + STRATEGY_SNAPSHOT.time_budget
    row = operation(services.db, operation_id)
    assert row is not None
    assert (row.budget_day, row.reserved_tokens) == (runs_at.date(), 0)
    clock.advance(STRATEGY_SNAPSHOT.time_budget.total_seconds() + 60)
    services.sweep()
    assert ops.get("jane", operation_id).state == QUEUED


def test_a_killed_last_attempt_releases_the_reservation_and_spends_nothing(
    services: Services, ops: OpsClient, clock: ManualClock
) -> None:
    entitle(services.db, "bob")
    admitted = _admit(services, "bob").operation
    for attempt in range(3):  # every attempt's worker dies before the model answers
        ops.claim_one(SNAPSHOT, LEASE_SECONDS)
        clock.advance(LEASE_SECONDS + 1)
        services.sweep()
        if attempt < 2:
            clock.advance(60)
            services.sweep()
    assert ops.get("bob", admitted.id).state == FAILED
    assert _day(services, "bob") == (0, 0)


def _settled_late(ops: OpsClient, lease: Lease, usage: ops_pb.Usage) -> tuple[str, bool]:
    """A completion of ``lease`` carrying ``usage``: (its error code, whether its usage was
    charged)."""
    item = ops_pb.SettleOperationsRequest.Item(owner_id=lease.owner, usage=usage)
    item.complete.operation_id, item.complete.lease_token = lease.id, lease.token
    reply = ops.stub.SettleOperations(
        ops_pb.SettleOperationsRequest(items=[item]), metadata=ops.neutral
    )
    (answer,) = reply.outcomes
    return answer.error_code, answer.usage_charged


def test_the_usage_of_a_settlement_that_outlived_its_lease_is_charged_once_when_it_comes(
    services: Services, ops: OpsClient, clock: ManualClock
) -> None:
    """An outage longer than the lease: the worker's settlement came once the sweeper had
    ended its attempt, and the tokens its model calls used were never charged."""
    entitle(services.db, "alice")
    admitted = _admit(services, "alice").operation
    outlived = ops.claim_one(SNAPSHOT, LEASE_SECONDS)
    clock.advance(LEASE_SECONDS + 1)
    assert services.sweep().expired_leases == 1
    assert _day(services, "alice") == (EXPECTED, 0)

    for _ in range(2):  # the repeat of a settlement whose answer was lost: charged once
        assert _settled_late(ops, outlived, _used(300, 40, 800)) == ("lease_lost", True)
        assert _day(services, "alice") == (EXPECTED - 340, 340)  # drawn from the reservation
    # Other figures for the same attempt are not its settlement's: refused, nothing charged.
    assert _settled_late(ops, outlived, _used(1, 1, 1)) == ("lease_lost", False)
    assert ops.get("alice", admitted.id).state == WAITING_FOR_RETRY
    row = operation(services.db, admitted.id)
    assert row is not None
    assert (row.prompt_tokens, row.completion_tokens, row.model_ms) == (300, 40, 800)

    clock.advance(60)
    assert services.sweep().promoted == 1
    last = ops.claim_one(SNAPSHOT, LEASE_SECONDS)
    clock.advance(LEASE_SECONDS + 1)
    # Come before the sweeper: it ends the attempt as the sweeper would, with its usage.
    assert _settled_late(ops, last, _used(50, 10, 100)) == ("lease_lost", True)
    assert ops.get("alice", admitted.id).state == WAITING_FOR_RETRY
    assert services.sweep().expired_leases == 0
    assert _day(services, "alice") == (EXPECTED - 400, 400)
    clock.advance(60)
    services.sweep()
    final = ops.claim_one(SNAPSHOT, LEASE_SECONDS)
    clock.advance(LEASE_SECONDS + 1)
    services.sweep()
    assert ops.get("alice", admitted.id).state == FAILED
    assert _day(services, "alice") == (0, 400)  # the rest of the reservation given back
    # After the end: spent, and nothing is reserved again.
    assert _settled_late(ops, final, _used(100, 20, 300)) == ("lease_lost", True)
    assert _settled_late(ops, last, _used(50, 10, 100)) == ("lease_lost", True)  # a repeat
    assert _day(services, "alice") == (0, 520)
    assert _spent_by_attempts(services, "alice") == 520
    _stored_sums_agree(services)


def test_a_settlement_of_another_lease_or_owner_charges_nothing(
    services: Services, ops: OpsClient, clock: ManualClock
) -> None:
    entitle(services.db, "alice")
    _admit(services, "alice")
    held = ops.claim_one(SNAPSHOT, LEASE_SECONDS)
    forged = Lease(held.operation, held.owner, "not-" + held.token)
    assert _settled_late(ops, forged, _used(300, 40, 800)) == ("lease_lost", False)
    other_owner = Lease(held.operation, "mallory", held.token)
    assert _settled_late(ops, other_owner, _used(300, 40, 800)) == ("operation_not_found", False)
    assert _day(services, "alice") == (EXPECTED, 0)
    assert _spent_by_attempts(services, "alice") == 0


def test_a_cancelled_queued_analysis_gives_its_reservation_back(
    services: Services, ops: OpsClient
) -> None:
    entitle(services.db, "carol")
    admitted = _admit(services, "carol").operation
    ops.cancel("carol", admitted.id)
    assert _day(services, "carol") == (0, 0)


def test_past_the_budget_the_gateway_answers_429_with_retry_after_and_the_sentence(
    services: Services, ops: OpsClient
) -> None:
    entitle(services.db, "alice")
    _set_budget(services, "alice", EXPECTED + 600)

    async def start(client: httpx.AsyncClient) -> httpx.Response:
        job = await client.post("/api/jobs", json=JOB, headers=bearer("alice"))
        cv = await client.post("/api/attachments", json=CV, headers=bearer("alice"))
        path = f"/api/jobs/{job.json()['id']}/strategy-snapshot"
        return await client.post(
            path, json={"attachment_id": cv.json()["id"]}, headers=bearer("alice")
        )

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            first = await start(client)
            assert first.status_code == 202
            settings = (await client.get("/api/settings/ai", headers=bearer("alice"))).json()
            assert settings["budget"] == {
                "limit": EXPECTED + 600,
                "spent": 0,
                "reserved": EXPECTED,
                "renews_at": (NOON.replace(hour=0) + timedelta(days=1)).strftime(
                    "%Y-%m-%dT%H:%M:%S.%fZ"
                ),
            }

            over = await start(client)
            body = _problem(over, 429, "budget_exhausted")
            assert body["detail"] == (  # the first one's worst case holds most of the budget
                f"Your daily AI budget has 600 tokens left, fewer than one analysis may use"
                f" ({EXPECTED:,}); it renews at 00:00 UTC."
            )
            assert over.headers["retry-after"] == str(12 * 3600)  # noon to midnight UTC

            # The first analysis ends having spent 587: its reservation's rest comes back.
            lease = ops.claim_one(SNAPSHOT)
            _settle(
                ops, lease, _used(316, 271, 900), ops_pb.CompleteOperationRequest(provenance=LOCAL)
            )
            again = await start(client)
            assert again.status_code == 202

    run(scenario())
    assert _day(services, "alice") == (EXPECTED, 587)


def test_the_owners_budget_holds_what_was_spent_as_well_as_what_is_reserved_to_the_token(
    services: Services, ops: OpsClient
) -> None:
    """An ended analysis gives back the rest of its reservation, not what it spent: one
    token short of a day's budget spent and reserved is refused, and an analysis that
    fits exactly what is left is admitted."""
    entitle(services.db, "lena")
    _admit(services, "lena")
    lease = ops.claim_one(SNAPSHOT)
    _settle(ops, lease, _used(316, 271, 900), ops_pb.CompleteOperationRequest(provenance=LOCAL))
    assert _day(services, "lena") == (0, 587)

    _set_budget(services, "lena", 587 + EXPECTED - 1)
    code, _retry_after, message = _refusal(lambda: _admit(services, "lena"))
    assert code == "budget_exhausted"
    assert message.startswith(f"Your daily AI budget has {EXPECTED - 1:,} tokens left")
    _set_budget(services, "lena", 587 + EXPECTED)
    assert _admit(services, "lena").reused is False
    assert _day(services, "lena") == (EXPECTED, 587)


def test_a_budget_smaller_than_one_analysis_is_429_without_retry_after_over_http(
    services: Services,
) -> None:
    """The detail says none can start until the budget is raised: a ``Retry-After`` to
    midnight (it was 47,297 s) would send a client back to the same refusal."""
    entitle(services.db, "kim")
    _set_budget(services, "kim", EXPECTED // 2)

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            job = await client.post("/api/jobs", json=JOB, headers=bearer("kim"))
            path = f"/api/jobs/{job.json()['id']}/strategy-snapshot"
            refused = await client.post(path, headers=bearer("kim"))
            body = _problem(refused, 429, "budget_exhausted")
            assert body["detail"].endswith("none can start until the budget is raised.")
            assert "retry-after" not in refused.headers

    run(scenario())


def test_an_operator_can_stop_an_owners_analyses_and_give_back_the_plans_budget(
    services: Services,
) -> None:
    entitle(services.db, "dana")
    _set_budget(services, "dana", 0)
    code, retry_after, message = _refusal(lambda: _admit(services, "dana"))
    # Not "used up; it renews at 00:00 UTC" with a Retry-After to then: it renews to 0.
    assert (code, retry_after) == ("budget_exhausted", None)
    assert message == (
        f"Your daily AI budget (0 tokens) is less than one analysis may use ({EXPECTED:,}):"
        " none can start until the budget is raised."
    )
    _set_budget(services, "dana", None)  # back to the plan's
    assert _admit(services, "dana").reused is False
    reply = services.workspace.GetAiSettings(
        workspace_pb2.GetAiSettingsRequest(), metadata=metadata(Role.GATEWAY, "dana")
    )
    assert (reply.budget.limit, reply.budget.reserved) == (budgets.PRO_DAILY_TOKENS, EXPECTED)


def test_the_global_budget_holds_across_owners(db_url: str, clock: ManualClock) -> None:
    limits = Limits(per_user=20, global_=50, global_daily_tokens=2 * EXPECTED + 10)
    with running_services(db_url, clock, limits) as services:
        for owner in ("alice", "bob"):
            entitle(services.db, owner)
            assert _admit(services, owner).reused is False
        entitle(services.db, "carol")
        code, _retry_after, message = _refusal(lambda: _admit(services, "carol"))
    assert code == "budget_exhausted"
    assert message == (
        f"Today's AI budget for everyone has 10 tokens left, fewer than one analysis may use"
        f" ({EXPECTED:,}); it renews at 00:00 UTC."
    )


def test_the_global_budget_of_a_scheduled_day_is_that_days_alone(
    db_url: str, clock: ManualClock
) -> None:
    """What all owners scheduled for tomorrow fills tomorrow's global budget, and only
    tomorrow's: another owner's analysis for tomorrow is refused naming that day, and
    today's is admitted."""
    limits = Limits(per_user=20, global_=50, global_daily_tokens=ALONE + 10)
    with running_services(db_url, clock, limits) as services:
        tomorrow = NOON + timedelta(days=1)

        def scheduled(owner: str) -> pb.AdmitResponse:
            request = snapshot_request(create_job(services.workspace, owner))
            request.not_before.FromDatetime(tomorrow)
            response: pb.AdmitResponse = services.admission.Admit(
                request, metadata=metadata(Role.GATEWAY, owner)
            )
            return response

        for owner in ("alice", "bob"):
            entitle(services.db, owner)
        assert scheduled("alice").reused is False
        code, retry_after, message = _refusal(lambda: scheduled("bob"))
        assert code == "budget_exhausted"
        assert message.startswith(f"The AI budget of {tomorrow.date().isoformat()}")
        assert retry_after == str(36 * 3600)  # noon today to the end of tomorrow
        assert _admit(services, "bob", cv=False).reused is False  # today's is untouched
        assert _day(services, "alice", tomorrow.date()) == (ALONE, 0)
        assert _day(services, "bob") == (ALONE, 0)


def test_concurrent_admissions_through_two_replicas_never_pass_a_budget(
    db_url: str, clock: ManualClock
) -> None:
    """Admissions at once through two admission replicas. First six of alice's, whose own
    budget has room for three; then three of bob's and three of carol's, with the global
    budget's room for five in all, two of them left. Exactly as many are admitted as fit,
    and reserved + spent stays within each budget."""
    limits = Limits(per_user=20, global_=50, global_daily_tokens=5 * ALONE + 10)
    with contextlib.ExitStack() as stack:
        replicas = [stack.enter_context(running_services(db_url, clock, limits)) for _ in "ab"]
        for owner in ("alice", "bob", "carol"):
            entitle(replicas[0].db, owner)
        _set_budget(replicas[0], "alice", 3 * ALONE + 10)

        def race(owners: list[str]) -> list[str]:
            requests = [
                (owner, snapshot_request(create_job(replicas[0].workspace, owner)))
                for owner in owners
            ]

            def admit(n: int) -> str:
                owner, request = requests[n]
                try:
                    replicas[n % 2].admission.Admit(request, metadata=metadata(Role.GATEWAY, owner))
                except grpc.RpcError as refused:
                    return f"{owner}:{_trailers(refused)['x-error-code']}"
                return f"{owner}:admitted"

            with ThreadPoolExecutor(len(requests)) as pool:
                return sorted(pool.map(admit, range(len(requests))))

        alone = race(["alice"] * 6)
        assert alone == ["alice:admitted"] * 3 + ["alice:budget_exhausted"] * 3
        alice = _day(replicas[0], "alice")
        assert alice == (3 * ALONE, 0)

        together = race(["bob", "carol"] * 3)
        everyone = replicas[0].db.run(
            lambda tx: budget_store.everyone_use(tx, NOON.date()), owner_id=None, write=False
        )
    admitted = [answer for answer in together if answer.endswith(":admitted")]
    assert len(admitted) == 2, together
    assert len(together) - len(admitted) == together.count("bob:budget_exhausted") + (
        together.count("carol:budget_exhausted")
    )
    assert everyone.used == 5 * ALONE <= 5 * ALONE + 10


def test_opsctl_users_set_budget(
    services: Services,
    db_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("getpass.getuser", lambda: "ops.admin")
    entitle(services.db, "erin")
    assert cli.main(["users", "set-budget", "erin", "2000", "--database-url", db_url]) == 0
    out = capsys.readouterr().out
    assert "erin: daily token budget 2,000 (set by ops.admin); 0 used today" in out
    kept = select(OwnerTokenBudget.daily_tokens, OwnerTokenBudget.set_by)
    assert services.db.run(
        lambda tx: tuple(tx.across_owners().execute(kept).one()), owner_id=None
    ) == (2000, "ops.admin")
    code, _retry_after, _message = _refusal(lambda: _admit(services, "erin"))
    assert code == "budget_exhausted"  # 2,000 is less than one analysis's reservation

    assert cli.main(["users", "set-budget", "erin", "default", "--database-url", db_url]) == 0
    assert "daily token budget 100,000 (the plan's default)" in capsys.readouterr().out
    assert scalar(services.db, select(func.count()).select_from(OwnerTokenBudget)) == 0
    assert _admit(services, "erin").reused is False

    for wrong in ("-1", "lots", "1e6", str(budgets.DAILY_TOKENS_MAX + 1), "٣"):
        assert cli.main(["users", "set-budget", "erin", wrong, "--database-url", db_url]) == 2
        assert "TOKENS must be `default` or a whole number" in capsys.readouterr().err
    top = str(budgets.DAILY_TOKENS_MAX)  # the bound the refusal names is allowed
    assert cli.main(["users", "set-budget", "erin", top, "--database-url", db_url]) == 0
    assert f"daily token budget {budgets.DAILY_TOKENS_MAX:,} (set by" in capsys.readouterr().out


class _Terminal(io.StringIO):
    """A stderr that is a person's terminal."""

    def isatty(self) -> bool:
        return True


def test_opsctl_set_budget_says_used_and_reserved_as_the_page_and_logs_nothing_to_a_person(
    services: Services,
    ops: OpsClient,
    db_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """It said "19,881 used today" where the page said "17,422 used and 2,459 reserved", and
    printed a ``[info] token_budget_set`` log line beside its answer on the terminal."""
    monkeypatch.setattr("getpass.getuser", lambda: "ops.admin")
    entitle(services.db, "fay")
    _admit(services, "fay")
    lease = ops.claim_one(SNAPSHOT)
    _settle(ops, lease, _used(316, 271, 900), ops_pb.CompleteOperationRequest(provenance=LOCAL))
    _admit(services, "fay")  # holds its reservation
    assert _day(services, "fay") == (EXPECTED, 587)
    capsys.readouterr()  # the services' own lines so far
    terminal = _Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    assert cli.main(["users", "set-budget", "fay", "50000", "--database-url", db_url]) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        f"fay: daily token budget 50,000 (set by ops.admin); 587 used and {EXPECTED:,} reserved"
        " today, renews "
    ), out
    assert terminal.getvalue() == ""  # the answer says it all to a person
    monkeypatch.undo()
    # Redirected (a script, a service's journal), the audit line is written as before.
    assert cli.main(["users", "set-budget", "fay", "default", "--database-url", db_url]) == 0
    said = capsys.readouterr()
    assert "token_budget_set" in said.err
    assert "token_budget_set" not in said.out


def test_the_prune_forgets_day_rows_older_than_a_month_and_keeps_the_rest(
    services: Services, clock: ManualClock
) -> None:
    entitle(services.db, "hana")
    kept_back = NOON.date() - timedelta(days=budget_store.DAYS_KEPT)
    for day in (NOON.date() - timedelta(days=400), kept_back - timedelta(days=1), kept_back):
        services.db.run(
            partial(budget_store.reserve, tokens=5, limit=10, day=day, now=NOON), owner_id="hana"
        )
    _admit(services, "hana")
    policy = RetentionPolicy(operations=timedelta(days=30), tombstones=timedelta(days=30))
    run(pruner.prune(services.db, clock, policy, 100))
    assert _day(services, "hana", NOON.date() - timedelta(days=400)) == (0, 0)
    assert _day(services, "hana", kept_back - timedelta(days=1)) == (0, 0)
    assert _day(services, "hana", kept_back) == (5, 0)
    assert _day(services, "hana") == (EXPECTED, 0)
