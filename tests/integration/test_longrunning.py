"""google.longrunning.Operations, driven by google-api-core's own client, on both engines.

The client is the one every Google-style caller uses (``operations_v1``), and
its polling future (``operation.from_gapic``) runs to a result, a cancel and
a failure. ``WaitOperation`` is woken by this replica's commits and, for a
change through another replica, by the shared done watch. Timeouts here only
keep a broken build from hanging; nothing is timed.
"""

from __future__ import annotations

import time
from datetime import timedelta

import grpc
import pytest
from google.api_core import exceptions, operation, operations_v1
from google.longrunning import operations_pb2_grpc as lro_grpc
from google.longrunning import operations_proto_pb2 as lro
from google.rpc import code_pb2, error_details_pb2

from durable_ops.api.operations.v1 import operations_pb2 as pb
from tests.support.grpc_services import Services
from tests.support.later import later
from tests.support.operations_client import ALICE, BOB, TASK, Lease, OpsClient, rpc_failure

HANG_GUARD = 20.0


@pytest.fixture
def standard(services: Services) -> operations_v1.OperationsClient:
    return operations_v1.OperationsClient(services.channel)


def _future(
    standard: operations_v1.OperationsClient, ops: OpsClient, operation_id: str
) -> operation.Operation:
    md = list(ops.gateway(ALICE))
    first = standard.get_operation(f"operations/{operation_id}", metadata=md)
    return operation.from_gapic(
        first, standard, pb.OperationResult, grpc_metadata=md, metadata_type=pb.Operation
    )


def test_the_polling_future_runs_to_the_result(
    ops: OpsClient, standard: operations_v1.OperationsClient
) -> None:
    created = ops.create(ALICE, "lro-done", subject_id="job-9")
    future = _future(standard, ops, created.id)
    assert not future.done()
    assert future.metadata.state == pb.OPERATION_STATE_QUEUED
    with later(lambda: ops.complete(ops.claim_one())):
        result = future.result(timeout=HANG_GUARD)
    assert result == pb.OperationResult(
        task_type=TASK,
        subject=pb.Subject(type="job", id="job-9"),
        status_url=f"/api/operations/{created.id}",
    )
    assert future.metadata.state == pb.OPERATION_STATE_SUCCEEDED


def test_cancelling_through_the_future_cancels_the_operation(
    ops: OpsClient, standard: operations_v1.OperationsClient
) -> None:
    created = ops.create(ALICE, "lro-cancel")
    future = _future(standard, ops, created.id)
    assert future.cancel()
    assert future.cancelled()
    assert ops.get(ALICE, created.id).state == pb.OPERATION_STATE_CANCELLED
    with pytest.raises(exceptions.Cancelled):
        future.result(timeout=HANG_GUARD)


def test_a_failure_is_a_mapped_status_with_its_reason_and_never_the_stored_text(
    ops: OpsClient, standard: operations_v1.OperationsClient
) -> None:
    created = ops.create(ALICE, "lro-fail")
    future = _future(standard, ops, created.id)
    lease = ops.claim_one()
    ops.fail(lease, retryable=False, code="subject_not_found", message="the model said: secret")
    with pytest.raises(exceptions.NotFound) as raised:
        future.result(timeout=HANG_GUARD)
    assert "secret" not in str(raised.value)
    done = standard.get_operation(f"operations/{created.id}", metadata=list(ops.gateway(ALICE)))
    assert done.done
    assert done.error.code == code_pb2.NOT_FOUND
    info = error_details_pb2.ErrorInfo()
    assert done.error.details[0].Unpack(info)
    assert (info.reason, info.domain) == ("subject_not_found", "durable-ops")
    assert "secret" not in str(done)


def test_list_filters_by_state_and_task_type_and_refuses_anything_else(
    ops: OpsClient, standard: operations_v1.OperationsClient
) -> None:
    first = ops.create(ALICE, "lro-list-1")
    ops.create(ALICE, "lro-list-2", task_type="cv.review", subject_type="attachment")
    ops.cancel(ALICE, first.id)
    md = list(ops.gateway(ALICE))
    everything = list(standard.list_operations("operations", "", metadata=md))
    assert len(everything) == 2
    cancelled = list(
        standard.list_operations(
            "operations", f'state="cancelled" AND task_type={TASK}', metadata=md
        )
    )
    assert [item.name for item in cancelled] == [f"operations/{first.id}"]
    assert cancelled[0].done
    assert cancelled[0].error.code == code_pb2.CANCELLED
    for bad in ("owner=bob", "state=sleeping", "state=queued OR state=running", "state"):
        with pytest.raises(exceptions.InvalidArgument, match="filter"):
            list(standard.list_operations("operations", bad, metadata=md))


def test_another_owner_sees_nothing_and_names_are_checked(
    ops: OpsClient, standard: operations_v1.OperationsClient
) -> None:
    created = ops.create(ALICE, "lro-owner")
    bob = list(ops.gateway(BOB))
    with pytest.raises(exceptions.NotFound):
        standard.get_operation(f"operations/{created.id}", metadata=bob)
    with pytest.raises(exceptions.NotFound):
        standard.cancel_operation(f"operations/{created.id}", metadata=bob)
    assert list(standard.list_operations("operations", "", metadata=bob)) == []
    with pytest.raises(exceptions.InvalidArgument, match="operations/"):
        standard.get_operation(created.id, metadata=list(ops.gateway(ALICE)))
    with pytest.raises(exceptions.PermissionDenied):  # no owner scope at all
        standard.get_operation(f"operations/{created.id}", metadata=list(ops.neutral))


def test_delete_refuses_a_live_operation_and_keeps_the_key_of_a_finished_one(
    ops: OpsClient, standard: operations_v1.OperationsClient
) -> None:
    """Delete is retention for one operation (ADR 0021): the record goes, its key stays."""
    created = ops.create(ALICE, "lro-delete")
    md = list(ops.gateway(ALICE))
    name = f"operations/{created.id}"
    with pytest.raises(exceptions.FailedPrecondition, match="cancel it first"):
        standard.delete_operation(name, metadata=md)
    ops.cancel(ALICE, created.id)
    with pytest.raises(exceptions.NotFound):  # another owner's is not found, and stays
        standard.delete_operation(name, metadata=list(ops.gateway(BOB)))
    standard.delete_operation(name, metadata=md)
    with pytest.raises(exceptions.NotFound):
        standard.get_operation(name, metadata=md)
    with pytest.raises(exceptions.NotFound):  # deleted once
        standard.delete_operation(name, metadata=md)
    refused = rpc_failure(lambda: ops.create(ALICE, "lro-delete"))
    assert (refused.code, refused.error_code) == (
        grpc.StatusCode.ALREADY_EXISTS,
        "operation_pruned",
    )
    assert ops.notification_rows(created.id) == []  # the notification stays, unlinked
    assert [notice.outcome for notice in ops.all_notifications(ALICE)] == ["cancelled"]


def _wait(services: Services, ops: OpsClient, operation_id: str, seconds: float) -> lro.Operation:
    request = lro.WaitOperationRequest(name=f"operations/{operation_id}")
    request.timeout.FromTimedelta(timedelta(seconds=seconds))
    stub = lro_grpc.OperationsStub(services.channel)
    answer: lro.Operation = stub.WaitOperation(
        request, metadata=ops.gateway(ALICE), timeout=seconds + HANG_GUARD
    )
    return answer


def test_wait_answers_when_this_replica_finishes_the_operation(
    services: Services, ops: OpsClient
) -> None:
    created = ops.create(ALICE, "lro-wait-here")
    with later(lambda: ops.complete(ops.claim_one())):
        done = _wait(services, ops, created.id, seconds=HANG_GUARD)
    assert done.done
    assert done.HasField("response")


def test_wait_answers_when_another_replica_finishes_the_operation(
    services: Services, other_replica: Services, ops: OpsClient
) -> None:
    created = ops.create(ALICE, "lro-wait-there")
    elsewhere = OpsClient(other_replica)
    with later(lambda: elsewhere.acknowledge_cancel(_cancelled_lease(elsewhere))):
        done = _wait(services, ops, created.id, seconds=HANG_GUARD)
    assert done.done
    assert done.error.code == code_pb2.CANCELLED
    assert services.operations_app.watch.polls >= 1  # found by the shared query


def _cancelled_lease(ops: OpsClient) -> Lease:
    lease = ops.claim_one()
    ops.cancel(ALICE, lease.id)
    return lease


def test_wait_answers_only_when_done_not_when_the_operation_starts(
    services: Services, ops: OpsClient
) -> None:
    """Google's ``WaitOperation``: done or the timeout; a change of state alone (which our
    own ``WaitOperation`` answers) is not its answer."""
    created = ops.create(ALICE, "lro-wait-start")
    started = time.monotonic()
    with later(ops.claim_one):
        answer = _wait(services, ops, created.id, seconds=0.8)
    assert time.monotonic() - started >= 0.8
    assert not answer.done
    metadata = pb.Operation()
    assert answer.metadata.Unpack(metadata)
    assert metadata.state == pb.OPERATION_STATE_RUNNING


def test_wait_returns_the_live_operation_at_its_timeout(services: Services, ops: OpsClient) -> None:
    created = ops.create(ALICE, "lro-wait-timeout")
    answer = _wait(services, ops, created.id, seconds=0.3)
    assert not answer.done
    metadata = pb.Operation()
    assert answer.metadata.Unpack(metadata)
    assert metadata.state == pb.OPERATION_STATE_QUEUED


def test_wait_refuses_a_negative_timeout(services: Services, ops: OpsClient) -> None:
    created = ops.create(ALICE, "lro-wait-negative")
    request = lro.WaitOperationRequest(name=f"operations/{created.id}")
    request.timeout.seconds = -1
    with pytest.raises(grpc.RpcError) as raised:
        lro_grpc.OperationsStub(services.channel).WaitOperation(
            request, metadata=ops.gateway(ALICE), timeout=HANG_GUARD
        )
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_a_worker_key_cancels_and_deletes_nothing(
    ops: OpsClient, standard: operations_v1.OperationsClient
) -> None:
    """Only the gateway and producers change an owner's operations (worker_role_refused)."""
    created = ops.create(ALICE, "lro-by-a-worker")
    worker = list(ops.worker_for(ALICE))
    name = f"operations/{created.id}"
    with pytest.raises(exceptions.PermissionDenied, match="lease tokens"):
        standard.cancel_operation(name, metadata=worker)
    with pytest.raises(exceptions.PermissionDenied, match="lease tokens"):
        standard.delete_operation(name, metadata=worker)
    assert standard.get_operation(name, metadata=worker).name == name
    assert ops.get(ALICE, created.id).state == pb.OPERATION_STATE_QUEUED
