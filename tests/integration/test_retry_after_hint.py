"""A retryable failure's ``retry_after`` (a model's Retry-After) through the real Operations
service, on both engines: the next attempt waits for it, not for the operation's own retry
delay alone; one past the deadline fails the operation now; one out of bounds is refused.

Time moves only by ``ManualClock.advance``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import grpc
import pytest

from durable_ops.api.operations.v1 import operations_pb2 as pb
from tests.support.clock import ManualClock
from tests.support.grpc_services import Services
from tests.support.operations_client import (
    ALICE,
    FAILED,
    RUNNING,
    WAITING_FOR_RETRY,
    Lease,
    OpsClient,
    expect_failure,
    later,
)

HOUR = timedelta(hours=1)
RATE_LIMITED = "model_rate_limited"


def _next_attempt_at(ops: OpsClient, operation_id: str) -> datetime:
    return ops.get(ALICE, operation_id).next_attempt_at.ToDatetime(tzinfo=UTC)


def test_a_fail_told_to_come_back_in_an_hour_waits_an_hour(
    services: Services, ops: OpsClient, clock: ManualClock
) -> None:
    created = ops.create(ALICE, "k-hour", retry_delay_seconds=5)
    failed_at = services.clock()
    lease = ops.claim_one()
    assert ops.fail(lease, retryable=True, code=RATE_LIMITED, retry_after=HOUR) == (
        WAITING_FOR_RETRY
    )
    assert _next_attempt_at(ops, created.id) == failed_at + HOUR  # not 5-10 s
    clock.advance(20)  # past the operation's own retry wait
    assert services.sweep().promoted == 0
    assert ops.claim() is None
    clock.advance(3600 - 20)
    assert services.sweep().promoted == 1
    assert ops.claim_one().operation.attempt == 2


def test_a_hint_shorter_than_the_own_retry_delay_changes_nothing(
    services: Services, ops: OpsClient
) -> None:
    created = ops.create(ALICE, "k-short", retry_delay_seconds=30)
    failed_at = services.clock()
    assert ops.fail(ops.claim_one(), retryable=True, retry_after=timedelta(seconds=2)) == (
        WAITING_FOR_RETRY
    )
    # The own jittered wait: from the retry delay to twice it (``lifecycle.retry_wait``).
    waits = _next_attempt_at(ops, created.id) - failed_at
    assert timedelta(seconds=30) <= waits <= timedelta(seconds=60)


def test_a_hint_past_the_deadline_fails_now_with_the_failures_own_code(
    services: Services, ops: OpsClient
) -> None:
    created = ops.create(ALICE, "k-past-deadline", deadline=later(services, 1800))
    lease = ops.claim_one()
    assert ops.fail(lease, retryable=True, code=RATE_LIMITED, retry_after=HOUR) == FAILED
    failed = ops.get(ALICE, created.id)
    assert (failed.state, failed.failure_code, failed.attempt) == (FAILED, RATE_LIMITED, 1)
    assert [row.outcome for row in ops.notification_rows(created.id)] == ["failed"]
    assert services.sweep().total == 0  # nothing left for the sweeper to fail closed


@pytest.mark.parametrize(
    "hint", [timedelta(0), timedelta(milliseconds=500), timedelta(days=1, seconds=1)]
)
def test_a_hint_out_of_bounds_is_refused_and_changes_nothing(
    services: Services, ops: OpsClient, hint: timedelta
) -> None:
    created = ops.create(ALICE, f"k-bounds-{hint.total_seconds()}")
    lease = ops.claim_one()
    expect_failure(
        lambda: ops.fail(lease, retryable=True, retry_after=hint),
        grpc.StatusCode.INVALID_ARGUMENT,
        "retry_after_out_of_range",
        field="retry_after",
    )
    assert ops.get(ALICE, created.id).state == RUNNING
    assert ops.fail(lease, retryable=True) == WAITING_FOR_RETRY  # the lease is still held


def test_a_hint_on_a_permanent_failure_is_refused(services: Services, ops: OpsClient) -> None:
    created = ops.create(ALICE, "k-permanent")
    lease = ops.claim_one()
    expect_failure(
        lambda: ops.fail(lease, retryable=False, retry_after=HOUR),
        grpc.StatusCode.INVALID_ARGUMENT,
        field="retry_after",
    )
    assert ops.get(ALICE, created.id).state == RUNNING


def _settle_failure(
    ops: OpsClient, lease: Lease, retry_after: timedelta
) -> pb.LeaseMutationsResponse.Outcome:
    fail = pb.FailOperationRequest(
        operation_id=lease.id, lease_token=lease.token, retryable=True, failure_code=RATE_LIMITED
    )
    fail.retry_after.FromTimedelta(retry_after)
    reply: pb.LeaseMutationsResponse = ops.stub.SettleOperations(
        pb.SettleOperationsRequest(
            items=[pb.SettleOperationsRequest.Item(owner_id=lease.owner, fail=fail)]
        ),
        metadata=ops.neutral,
    )
    (outcome,) = reply.outcomes
    return outcome


def test_the_settlement_channel_carries_the_hint(services: Services, ops: OpsClient) -> None:
    created = ops.create(ALICE, "k-channel", retry_delay_seconds=5)
    failed_at = services.clock()
    lease = ops.claim_one()
    refused = _settle_failure(ops, lease, timedelta(days=2))
    assert (refused.status_code, refused.error_code) == (
        grpc.StatusCode.INVALID_ARGUMENT.value[0],
        "retry_after_out_of_range",
    )
    assert _settle_failure(ops, lease, HOUR).state == WAITING_FOR_RETRY
    assert _next_attempt_at(ops, created.id) == failed_at + HOUR
