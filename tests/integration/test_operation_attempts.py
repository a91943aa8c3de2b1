"""Attempt history (issue 19, item 2) through the real servers, on both engines.

Each attempt (one lease) is recorded in ``operation_attempts`` by the claim that
starts it and ended by the transition that ends it, in the same transactions.
The operator sees attempts and the stored failure messages; the owner's view
does not change, and an owner's scope reads only its own attempts.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Literal

import pytest
from sqlalchemy import func, select
from structlog.testing import capture_logs

from durable_ops import cli
from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.api.operator.v1 import operator_pb2 as opb
from durable_ops.model.lifecycle import DEADLINE_FAILURE_CODE, LEASE_FAILURE_CODE
from durable_ops.model.scope import Role
from durable_ops.storage import operations
from durable_ops.storage.schema import OperationAttempt
from durable_ops.storage.tx import Tx
from tests.support.clock import ManualClock
from tests.support.grpc_services import Services
from tests.support.keys import key_env
from tests.support.operations_client import (
    ALICE,
    BOB,
    CANCELLED,
    FAILED,
    LEASE_SECONDS,
    QUEUED,
    SUCCEEDED,
    WAITING_FOR_RETRY,
    Lease,
    Metadata,
    OpsClient,
)
from tests.support.stored import scalar

RETRY_DELAY = 2


def _shown(services: Services, md: Metadata, operation_id: str) -> opb.OperatorOperation:
    found: opb.OperatorOperation = services.operator.GetOperation(
        opb.GetOperationRequest(operation_id=operation_id), metadata=md
    )
    return found


def _when(
    message: opb.OperatorAttempt, field: Literal["started_at", "lease_expires_at", "ended_at"]
) -> datetime | None:
    return getattr(message, field).ToDatetime(tzinfo=UTC) if message.HasField(field) else None


def _owners_attempts(services: Services, owner: str, operation_id: str) -> list[OperationAttempt]:
    def read(tx: Tx) -> list[OperationAttempt]:
        return operations.attempts(tx, operation_id)

    return services.db.run(read, owner_id=owner, write=False)


def _attempt_rows(services: Services) -> int:
    return int(scalar(services.db, select(func.count()).select_from(OperationAttempt)) or 0)


def _retry_due(services: Services, clock: ManualClock) -> None:
    """Past any jittered retry wait of a first failure, and the sweeper requeues it."""
    clock.advance(4 * RETRY_DELAY + 1)
    assert services.sweep().promoted == 1


def test_a_retried_then_succeeded_operation_has_two_attempts(
    services: Services, ops: OpsClient, clock: ManualClock, operator_md: Metadata
) -> None:
    created = ops.create(ALICE, "k-retried", max_attempts=3, retry_delay_seconds=RETRY_DELAY)
    first_claimed = clock()
    first = ops.claim_one()
    shown = _shown(services, operator_md, created.id)
    assert [(a.attempt, a.route, a.outcome) for a in shown.attempts] == [(1, "local", "")]
    assert _when(shown.attempts[0], "ended_at") is None  # still running
    assert _when(shown.attempts[0], "lease_expires_at") == first_claimed + timedelta(
        seconds=LEASE_SECONDS
    )

    clock.advance(3)
    first_failed = clock()
    busy = pb.Provenance(provider="http://127.0.0.1:1", model="small-1", route="local")
    state = ops.fail(
        first, retryable=True, code="model_busy", message="the model was busy", provenance=busy
    )
    assert state == WAITING_FOR_RETRY
    _retry_due(services, clock)
    second_claimed = clock()
    second = ops.claim_one()
    assert second.id == created.id
    clock.advance(1)
    answered = pb.Provenance(provider="http://127.0.0.1:2", model="small-2", route="local")
    assert ops.complete(second, provenance=answered) == SUCCEEDED
    completed = clock()

    shown = _shown(services, operator_md, created.id)
    assert shown.operation.state == SUCCEEDED
    failed, succeeded = shown.attempts
    assert (failed.attempt, failed.route, failed.outcome) == (1, "local", "failed_retryable")
    assert (failed.failure_code, failed.failure_message) == ("model_busy", "the model was busy")
    assert (failed.provider, failed.model) == ("http://127.0.0.1:1", "small-1")
    assert (_when(failed, "started_at"), _when(failed, "ended_at")) == (first_claimed, first_failed)
    assert (succeeded.attempt, succeeded.route, succeeded.outcome) == (2, "local", "succeeded")
    assert (succeeded.failure_code, succeeded.failure_message) == ("", "")
    assert (succeeded.provider, succeeded.model) == ("http://127.0.0.1:2", "small-2")
    assert _when(succeeded, "started_at") == second_claimed
    assert _when(succeeded, "ended_at") == completed
    # The list answer stays light; the owner's view has no attempts and no failure text.
    listed: opb.ListOperationsResponse = services.operator.ListOperations(
        opb.ListOperationsRequest(), metadata=operator_md
    )
    assert [len(found.attempts) for found in listed.operations] == [0]
    assert "the model was busy" not in str(ops.get(ALICE, created.id))

    # The owner's scope reads the same two rows.
    owned = _owners_attempts(services, ALICE, created.id)
    assert [(a.attempt, a.outcome) for a in owned] == [(1, "failed_retryable"), (2, "succeeded")]
    assert _attempt_rows(services) == 2


def test_a_manual_retry_counts_attempts_again_and_keeps_the_history(
    services: Services, ops: OpsClient, clock: ManualClock, operator_md: Metadata
) -> None:
    created = ops.create(BOB, "k-manual", max_attempts=1)
    assert ops.fail(ops.claim_one(), retryable=False, code="bad_input") == FAILED
    clock.advance(1)
    assert ops.retry(BOB, created.id).state == QUEUED
    assert ops.complete(ops.claim_one()) == SUCCEEDED
    shown = _shown(services, operator_md, created.id)
    assert [(a.attempt, a.outcome, a.failure_code) for a in shown.attempts] == [
        (1, "failed", "bad_input"),
        (1, "succeeded", ""),
    ]


def test_an_expired_lease_ends_its_attempt_as_expired(
    services: Services, ops: OpsClient, clock: ManualClock, operator_md: Metadata
) -> None:
    created = ops.create(ALICE, "k-expired", max_attempts=2, retry_delay_seconds=RETRY_DELAY)
    lease = ops.claim_one(lease_seconds=10)
    clock.advance(5)
    extended = clock() + timedelta(seconds=10)
    ops.heartbeat_once(lease, lease_seconds=10)  # heartbeats do not write the attempt
    (running,) = _shown(services, operator_md, created.id).attempts
    assert _when(running, "lease_expires_at") == extended  # but it shows the lease it runs on
    clock.advance(11)
    swept = clock()
    assert services.sweep().expired_leases == 1
    (expired,) = _shown(services, operator_md, created.id).attempts
    assert (expired.outcome, expired.failure_code) == ("expired", LEASE_FAILURE_CODE)
    assert _when(expired, "lease_expires_at") == extended  # the last expiry, read at the end
    assert _when(expired, "ended_at") == swept


def test_a_deadline_passed_with_the_lease_ends_its_attempt_as_deadline(
    services: Services, ops: OpsClient, clock: ManualClock, operator_md: Metadata
) -> None:
    created = ops.create(ALICE, "k-deadline", deadline=clock() + timedelta(seconds=20))
    ops.claim_one(lease_seconds=10)
    clock.advance(30)
    assert services.sweep().expired_leases == 1
    shown = _shown(services, operator_md, created.id)
    assert shown.operation.state == FAILED
    assert [(a.outcome, a.failure_code) for a in shown.attempts] == [
        ("deadline", DEADLINE_FAILURE_CODE)
    ]


def test_an_acknowledged_cancel_ends_its_attempt_as_cancelled(
    services: Services, ops: OpsClient, operator_md: Metadata
) -> None:
    created = ops.create(BOB, "k-cancelled")
    lease = ops.claim_one()
    assert ops.cancel(BOB, created.id).cancel_requested  # the attempt runs on until acknowledged
    assert [a.outcome for a in _shown(services, operator_md, created.id).attempts] == [""]
    assert ops.acknowledge_cancel(lease) == CANCELLED
    assert ops.acknowledge_cancel(lease) == CANCELLED  # a duplicate writes nothing again
    (cancelled,) = _shown(services, operator_md, created.id).attempts
    assert (cancelled.outcome, cancelled.failure_code) == ("cancelled", "")
    assert cancelled.HasField("ended_at")


def test_a_fallback_ends_the_local_attempt_and_the_external_claim_starts_another(
    services: Services, ops: OpsClient, clock: ManualClock, operator_md: Metadata
) -> None:
    created = ops.create(ALICE, "k-fallback")
    local = ops.claim_one()
    response: pb.LeaseMutationResponse = ops.stub.RequestExternalFallback(
        pb.RequestExternalFallbackRequest(
            operation_id=local.id,
            lease_token=local.token,
            provenance=pb.Provenance(provider="http://127.0.0.1:1", model="small", route="local"),
        ),
        metadata=ops.worker_for(ALICE),
    )
    assert response.state == pb.OPERATION_STATE_WAITING_FOR_EXTERNAL_FALLBACK
    clock.advance(1)

    def claim_external(tx: Tx) -> list[operations.Claim]:
        return operations.claim(
            tx, [created.task_type], LEASE_SECONDS, clock(), external_route=True
        )

    (claimed,) = services.db.run(claim_external, owner_id=None)
    external = Lease(created, ALICE, claimed.lease_token)
    assert ops.complete(external, provenance=pb.Provenance(model="big", route="external")) == (
        SUCCEEDED
    )
    shown = _shown(services, operator_md, created.id)
    assert [(a.attempt, a.route, a.outcome, a.model) for a in shown.attempts] == [
        (1, "local", "fallback", "small"),
        (1, "external", "succeeded", "big"),
    ]


def test_an_owner_reads_only_its_own_attempts(services: Services, ops: OpsClient) -> None:
    alices = ops.create(ALICE, "k-mine")
    ops.complete(ops.claim_one())
    assert [a.outcome for a in _owners_attempts(services, ALICE, alices.id)] == ["succeeded"]
    assert _owners_attempts(services, BOB, alices.id) == []  # as if it had none
    assert _owners_attempts(services, BOB, "0" * 32) == []


def test_opsctl_operations_show_prints_the_attempts(
    services: Services,
    ops: OpsClient,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name, value in key_env(Role.OPERATOR).items():  # the operator's own key
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("OPS_OPERATIONS_TARGET", services.target)
    created = ops.create(ALICE, "k-cli", max_attempts=1)
    ops.fail(ops.claim_one(), retryable=False, code="model_error", message="no answer")

    def opsctl(*args: str) -> str:
        capsys.readouterr()
        with capture_logs():
            assert cli.main(["operations", "show", created.id, *args]) == 0
        return capsys.readouterr().out

    shown = json.loads(opsctl("--json"))
    assert [(a["attempt"], a["route"], a["outcome"]) for a in shown["attempts"]] == [
        (1, "local", "failed")
    ]
    assert shown["attempts"][0]["failure_message"] == "no answer"
    text = opsctl()
    assert "attempts          1" in text
    assert "model_error" in text
    assert "#1 local: no answer" in text
