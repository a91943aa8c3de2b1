"""Batched leases (ADR 0022) through the real server, on both engines.

``ClaimOperations`` claims up to N operations in one transaction, each with
its own token and attempt row; ``SettleOperations`` settles many leases of
many owners in one transaction, each in its owner's scope and guarded on its
own token: a stale one is refused alone, the others commit with their
notifications.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import grpc
from sqlalchemy import func, select

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.storage.schema import OperationAttempt
from tests.support.clock import ManualClock
from tests.support.grpc_services import Services
from tests.support.operations_client import (
    ALICE,
    BOB,
    FAILED,
    OTHER_TASK,
    QUEUED,
    RUNNING,
    SUCCEEDED,
    TASK,
    WAITING_FOR_RETRY,
    OpsClient,
    expect_failure,
)
from tests.support.stored import rows, scalar

ABORTED = grpc.StatusCode.ABORTED.value[0]
INVALID = grpc.StatusCode.INVALID_ARGUMENT


def _claim(
    ops: OpsClient, limit: int, task_types: tuple[str, ...] = (TASK,), **fields: object
) -> list[pb.ClaimedOperation]:
    request = pb.ClaimOperationsRequest(
        task_types=list(task_types),
        lease_seconds=30,
        max_operations=limit,
        **fields,  # type: ignore[arg-type]
    )
    response: pb.ClaimOperationsResponse = ops.stub.ClaimOperations(request, metadata=ops.neutral)
    return list(response.claimed)


def _settle(
    ops: OpsClient, items: list[pb.SettleOperationsRequest.Item]
) -> list[pb.LeaseMutationsResponse.Outcome]:
    response: pb.LeaseMutationsResponse = ops.stub.SettleOperations(
        pb.SettleOperationsRequest(items=items), metadata=ops.neutral
    )
    return list(response.outcomes)


def _completion(
    owner_id: str, one: pb.ClaimedOperation, token: str | None = None
) -> pb.SettleOperationsRequest.Item:
    return pb.SettleOperationsRequest.Item(
        owner_id=owner_id,
        complete=pb.CompleteOperationRequest(
            operation_id=one.operation.id, lease_token=token or one.lease_token
        ),
    )


def _complete(
    ops: OpsClient, claimed: list[pb.ClaimedOperation], **tokens: str
) -> list[pb.LeaseMutationsResponse.Outcome]:
    items = [_completion(one.owner_id, one, tokens.get(one.operation.id)) for one in claimed]
    return _settle(ops, items)


def _attempts(services: Services) -> int:
    return int(scalar(services.db, select(func.count()).select_from(OperationAttempt)) or 0)


def test_a_batch_claim_takes_the_best_operations_each_with_its_own_lease(
    services: Services, ops: OpsClient, clock: ManualClock
) -> None:
    def create(owner: str, key: str, priority: int = 0) -> str:
        clock.advance(1)  # one order by age, whatever the ids drawn
        return ops.create(owner, key, priority=priority).id

    low = [create((ALICE, BOB)[n % 2], f"k-low-{n}") for n in range(5)]
    high = [create(BOB, f"k-high-{n}", priority=10) for n in range(2)]
    ops.create(ALICE, "k-other-task", task_type=OTHER_TASK)

    first = _claim(ops, 4)
    assert [one.operation.id for one in first] == [*high, *low[:2]]  # priority, then age
    assert len({one.lease_token for one in first}) == 4
    assert {one.owner_id for one in first} == {ALICE, BOB}
    assert {(one.operation.state, one.operation.attempt) for one in first} == {(RUNNING, 1)}
    now = services.clock().replace(tzinfo=None)
    assert all(one.lease_expires_at.ToDatetime() > now for one in first)
    assert _attempts(services) == 4
    rest = _claim(ops, 100)
    assert [one.operation.id for one in rest] == low[2:]
    assert _claim(ops, 3) == []
    # Each lease is a lease like any other: a heartbeat in its owner's scope extends it.
    lease = ops.claim_one((OTHER_TASK,))
    assert ops.get(ALICE, lease.id).state == RUNNING
    for one in first:
        assert ops.get(one.owner_id, one.operation.id).state == RUNNING


def test_a_batch_claim_waits_for_work_like_a_single_claim(
    services: Services, ops: OpsClient
) -> None:
    wait = pb.ClaimOperationsRequest().wait
    wait.FromTimedelta(timedelta(seconds=0.2))
    assert _claim(ops, 5, wait=wait) == []  # the wait passes, nothing claimed


def test_a_batch_completion_refuses_a_stale_lease_alone(services: Services, ops: OpsClient) -> None:
    created = {ops.create((ALICE, BOB)[n % 2], f"k-settle-{n}").id for n in range(3)}
    claimed = _claim(ops, 3)
    ids = [one.operation.id for one in claimed]
    assert set(ids) == created
    stale = claimed[1]
    outcomes = _complete(ops, claimed, **{stale.operation.id: "not-the-token"})

    assert [outcome.operation_id for outcome in outcomes] == ids
    assert [outcome.status_code for outcome in outcomes] == [0, ABORTED, 0]
    assert outcomes[1].error_code == "lease_lost"
    assert [outcome.state for outcome in outcomes] == [SUCCEEDED, 0, SUCCEEDED]
    assert ops.get(stale.owner_id, stale.operation.id).state == RUNNING
    per_operation = ops.notifications_per_operation()
    assert per_operation == {ids[0]: 1, ids[2]: 1}  # one each, in the same transaction

    # The stale one's holder still completes it; an exact repeat is recognised, not refused.
    again = _complete(ops, claimed)
    assert [outcome.state for outcome in again] == [SUCCEEDED] * 3
    assert [outcome.status_code for outcome in again] == [0, 0, 0]
    assert ops.notifications_per_operation() == dict.fromkeys(ids, 1)


def test_an_operation_named_twice_in_a_batch_is_completed_once(
    services: Services, ops: OpsClient
) -> None:
    created = ops.create(ALICE, "k-twice").id
    (claimed,) = _claim(ops, 1)
    outcomes = _complete(ops, [claimed, claimed])
    assert [(o.operation_id, o.state, o.status_code) for o in outcomes] == [
        (created, SUCCEEDED, 0),
        (created, SUCCEEDED, 0),  # the exact repeat is recognised
    ]
    assert ops.notifications_per_operation() == {created: 1}
    (attempt,) = rows(services.db, select(OperationAttempt))
    assert (attempt.outcome, attempt.ended_at is not None) == ("succeeded", True)


def test_a_batch_failure_retries_or_fails_each_as_asked(services: Services, ops: OpsClient) -> None:
    retried = ops.create(ALICE, "k-fail-retry").id
    failed = ops.create(BOB, "k-fail-final").id
    claimed = {one.operation.id: one for one in _claim(ops, 2)}
    items = [
        pb.SettleOperationsRequest.Item(
            owner_id=claimed[operation_id].owner_id,
            fail=pb.FailOperationRequest(
                operation_id=operation_id,
                lease_token=claimed[operation_id].lease_token,
                retryable=retryable,
                failure_code="model_error",
                failure_message="the model refused",
            ),
        )
        for operation_id, retryable in ((retried, True), (failed, False))
    ]
    outcomes = _settle(ops, items)
    assert [outcome.state for outcome in outcomes] == [WAITING_FOR_RETRY, FAILED]
    assert ops.get(BOB, failed).state == FAILED
    assert ops.notifications_per_operation() == {failed: 1}


def test_each_item_runs_in_the_owner_it_names(services: Services, ops: OpsClient) -> None:
    """A token only works with its own owner: naming another owner is refused, alone."""
    ops.create(ALICE, "k-owner-a")
    ops.create(ALICE, "k-owner-b")
    mine, other = _claim(ops, 2)
    outcomes = _settle(
        ops,
        [  # another owner's, an owner id that cannot be one, and the right one
            _completion(BOB, other),
            _completion("not an owner!", other),
            _completion(ALICE, mine),
        ],
    )
    codes = [(outcome.status_code, outcome.error_code) for outcome in outcomes]
    assert codes[0][0] == grpc.StatusCode.NOT_FOUND.value[0]  # bob has no such operation
    assert codes[1] == (INVALID.value[0], "invalid_argument")
    assert codes[2] == (0, "")
    assert ops.get(ALICE, other.operation.id).state == RUNNING
    assert Counter(ops.state_counts()) == Counter({"running": 1, "succeeded": 1})


def test_batches_refuse_bad_sizes_and_the_wrong_scope(services: Services, ops: OpsClient) -> None:
    for limit in (0, 101):
        expect_failure(lambda limit=limit: _claim(ops, limit), INVALID, field="max_operations")  # type: ignore[misc]
    many = tuple(f"type-{n}" for n in range(33))  # each is one part of the claim's UNION
    expect_failure(lambda: _claim(ops, 1, many), INVALID, field="task_types")
    expect_failure(lambda: _claim(ops, 1, routes=[pb.ROUTE_LOCAL, 99]), INVALID, field="routes")
    expect_failure(lambda: _settle(ops, []), INVALID, field="items")
    denied = grpc.StatusCode.PERMISSION_DENIED
    expect_failure(
        lambda: ops.stub.ClaimOperations(
            pb.ClaimOperationsRequest(task_types=[TASK], lease_seconds=30, max_operations=2),
            metadata=ops.worker_for(ALICE),
        ),
        denied,
    )
    expect_failure(
        lambda: ops.stub.SettleOperations(
            pb.SettleOperationsRequest(items=[pb.SettleOperationsRequest.Item()]),
            metadata=ops.gateway(ALICE),
        ),
        denied,
    )
    assert ops.state_counts() == {}
    assert ops.create(ALICE, "k-still-queued").state == QUEUED


def test_one_settlement_batch_carries_all_four_outcomes(services: Services, ops: OpsClient) -> None:
    ids = [ops.create((ALICE, BOB)[n % 2], f"k-all-{n}").id for n in range(4)]
    by_id = {one.operation.id: one for one in _claim(ops, 4)}
    completed, failed, fell_back, cancelled = (by_id[operation_id] for operation_id in ids)
    ops.cancel(cancelled.owner_id, cancelled.operation.id)

    items = [
        pb.SettleOperationsRequest.Item(
            owner_id=completed.owner_id,
            complete=pb.CompleteOperationRequest(
                operation_id=completed.operation.id, lease_token=completed.lease_token
            ),
        ),
        pb.SettleOperationsRequest.Item(
            owner_id=failed.owner_id,
            fail=pb.FailOperationRequest(
                operation_id=failed.operation.id,
                lease_token=failed.lease_token,
                failure_code="bad_input",
            ),
        ),
        pb.SettleOperationsRequest.Item(
            owner_id=fell_back.owner_id,
            fallback=pb.RequestExternalFallbackRequest(
                operation_id=fell_back.operation.id, lease_token=fell_back.lease_token
            ),
        ),
        pb.SettleOperationsRequest.Item(
            owner_id=cancelled.owner_id,
            acknowledge_cancel=pb.AcknowledgeCancellationRequest(
                operation_id=cancelled.operation.id, lease_token=cancelled.lease_token
            ),
        ),
        pb.SettleOperationsRequest.Item(  # the cancel was not asked for this one: refused alone
            owner_id=failed.owner_id,
            acknowledge_cancel=pb.AcknowledgeCancellationRequest(
                operation_id=completed.operation.id, lease_token=completed.lease_token
            ),
        ),
    ]
    response: pb.LeaseMutationsResponse = ops.stub.SettleOperations(
        pb.SettleOperationsRequest(items=items), metadata=ops.neutral
    )
    states = [(outcome.state, outcome.status_code) for outcome in response.outcomes]
    assert states[:4] == [
        (SUCCEEDED, 0),
        (FAILED, 0),
        (pb.OPERATION_STATE_WAITING_FOR_EXTERNAL_FALLBACK, 0),
        (pb.OPERATION_STATE_CANCELLED, 0),
    ]
    assert response.outcomes[4].error_code == "operation_not_found"  # another owner's lease


def test_a_settlement_naming_no_outcome_is_refused_whole(ops: OpsClient) -> None:
    expect_failure(
        lambda: ops.stub.SettleOperations(
            pb.SettleOperationsRequest(items=[pb.SettleOperationsRequest.Item(owner_id=ALICE)]),
            metadata=ops.neutral,
        ),
        INVALID,
        field="outcome",
    )
