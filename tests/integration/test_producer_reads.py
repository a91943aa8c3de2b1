"""What a producer reads back of its own task types' operations, on both engines.

A producer (its own ``producer`` key) creates operations of a task type the product's
registry does not know; its SDK worker completes one with a result reference and fails
another for good, and the sweeper fails a third at its deadline. Every owner-scope read
(GetOperation, WaitOperation, ListOperations, google.longrunning's GetOperation) answers
the reference of the succeeded one and the stable code of the failed ones, never a
failure message; the operator's view keeps the reference out (ADR 0019), and the HTTP
DTO (SPEC §5) shows neither. Timeouts only keep a broken build from hanging.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime

import httpx
import pytest
from google.longrunning import operations_pb2_grpc as lro_grpc
from google.longrunning import operations_proto_pb2 as lro

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.api.operator.v1 import operator_pb2 as opb
from durable_ops.model.scope import Role
from durable_ops.worker import Attempt, PermanentFailure, Worker
from tests.support.clock import ManualClock
from tests.support.gateway import OPERATION_FIELDS, bearer, gateway_client, make_app, run
from tests.support.grpc_services import Services
from tests.support.keys import signing_key
from tests.support.operations_client import ALICE, FAILED, SUCCEEDED, Metadata, OpsClient, later

HANG_GUARD = 30.0
THUMBS = "thumbs.render"  # no entry in the product's task registry: the producer's own
# What the worker says of the failure: stored for the operator, never the owner's to read.
DIAGNOSTIC = "decoder: no TIFF support (input /srv/uploads/img-2.tiff)"


@dataclass(frozen=True)
class Finished:
    made: str  # succeeded, its result at thumbs/<id>.png
    refused: str  # failed for good by its handler: unsupported_format
    late: str  # failed by the sweeper at its deadline: deadline_exceeded


def _producer(ops: OpsClient) -> Metadata:
    return ops.md(Role.PRODUCER, ALICE)


def _create(ops: OpsClient, key: str, subject_id: str, deadline: datetime | None = None) -> str:
    request = ops.create_request(
        key, task_type=THUMBS, subject_type="image", subject_id=subject_id, deadline=deadline
    )
    reply: pb.CreateOperationResponse = ops.stub.CreateOperation(request, metadata=_producer(ops))
    assert reply.created
    return reply.operation.id


@pytest.fixture
def finished(services: Services, ops: OpsClient, clock: ManualClock) -> Finished:
    late = _create(ops, "thumb-late", "img-3", deadline=later(services, 5))
    clock.advance(6)
    assert services.sweep().deadlines == 1
    made = _create(ops, "thumb-ok", "img-1")
    refused = _create(ops, "thumb-tiff", "img-2")
    worker = Worker(services.target, signing_key(Role.WORKER), until_empty=True)

    @worker.handler(THUMBS)
    async def render(attempt: Attempt) -> str:
        if attempt.subject.id == "img-2":
            raise PermanentFailure("unsupported_format", DIAGNOSTIC)
        return f"thumbs/{attempt.operation_id}.png"

    asyncio.run(asyncio.wait_for(worker.run(), HANG_GUARD))
    assert worker.completed == 1
    return Finished(made, refused, late)


def _reads(ops: OpsClient, operation_id: str) -> list[pb.Operation]:
    """The operation as each of our own owner-scope reads answers the producer."""
    producer = _producer(ops)
    got: pb.Operation = ops.stub.GetOperation(
        pb.GetOperationRequest(operation_id=operation_id), metadata=producer
    )
    waited: pb.Operation = ops.stub.WaitOperation(
        pb.WaitOperationRequest(operation_id=operation_id), metadata=producer, timeout=HANG_GUARD
    )
    page: pb.ListOperationsResponse = ops.stub.ListOperations(
        pb.ListOperationsRequest(task_type=THUMBS), metadata=producer
    )
    (listed,) = [found for found in page.operations if found.id == operation_id]
    return [got, waited, listed]


def _standard(services: Services, ops: OpsClient, operation_id: str) -> lro.Operation:
    """google.longrunning's GetOperation, as the producer calls it."""
    standard = lro_grpc.OperationsStub(services.channel)  # type: ignore[no-untyped-call]
    found: lro.Operation = standard.GetOperation(
        lro.GetOperationRequest(name=f"operations/{operation_id}"), metadata=_producer(ops)
    )
    return found


def _metadata(found: lro.Operation) -> pb.Operation:
    operation = pb.Operation()
    assert found.metadata.Unpack(operation)
    return operation


def test_a_producer_reads_the_result_reference_its_worker_completed_with(
    services: Services, ops: OpsClient, finished: Finished
) -> None:
    reference = f"thumbs/{finished.made}.png"
    for read in _reads(ops, finished.made):
        assert (read.state, read.result_ref, read.failure_code) == (SUCCEEDED, reference, "")

    standard = _standard(services, ops, finished.made)
    assert standard.done
    result = pb.OperationResult()
    assert standard.response.Unpack(result)
    assert result == pb.OperationResult(
        task_type=THUMBS,
        subject=pb.Subject(type="image", id="img-1"),
        status_url=f"/api/operations/{finished.made}",
        result_ref=reference,
    )
    assert _metadata(standard).result_ref == reference


def test_a_failure_answers_its_stable_code_and_never_its_message(
    services: Services, ops: OpsClient, finished: Finished
) -> None:
    for operation_id, code in (
        (finished.refused, "unsupported_format"),
        (finished.late, "deadline_exceeded"),
    ):
        reads = [*_reads(ops, operation_id), _metadata(_standard(services, ops, operation_id))]
        for read in reads:
            assert (read.state, read.failure_code, read.result_ref) == (FAILED, code, "")
            assert DIAGNOSTIC.encode() not in read.SerializeToString()
    assert DIAGNOSTIC not in str(_standard(services, ops, finished.refused))


def test_the_operator_view_keeps_the_result_reference_out(
    services: Services, ops: OpsClient, finished: Finished, operator_md: Metadata
) -> None:
    assert _reads(ops, finished.made)[0].result_ref  # there is one to keep out
    shown: opb.OperatorOperation = services.operator.GetOperation(
        opb.GetOperationRequest(operation_id=finished.made), metadata=operator_md
    )
    assert shown.operation.state == SUCCEEDED
    assert "thumbs/" not in str(shown)
    refused: opb.OperatorOperation = services.operator.GetOperation(
        opb.GetOperationRequest(operation_id=finished.refused), metadata=operator_md
    )
    assert (refused.failure_code, refused.failure_message) == ("unsupported_format", DIAGNOSTIC)


def test_the_http_dto_shows_neither_the_reference_nor_the_code(
    services: Services, ops: OpsClient, finished: Finished
) -> None:
    """The gRPC message carries both (checked first, so this cannot pass vacuously); the
    DTO built from it (SPEC §5) lists its own keys and shows neither."""
    assert _reads(ops, finished.made)[0].result_ref == f"thumbs/{finished.made}.png"
    assert _reads(ops, finished.refused)[0].failure_code == "unsupported_format"
    ids = (finished.made, finished.refused, finished.late)

    async def scenario() -> list[httpx.Response]:
        async with gateway_client(make_app(services.target)) as client:
            alice = bearer(ALICE)
            answers = [await client.get("/api/operations", headers=alice)]
            for operation_id in ids:
                answers.append(await client.get(f"/api/operations/{operation_id}", headers=alice))
                answers.append(
                    await client.get(
                        f"/api/operations/{operation_id}:wait?timeout=1", headers=alice
                    )
                )
            return answers

    listed, *single = run(scenario())
    dtos = [*listed.json()["items"], *(answer.json() for answer in single)]
    assert len(dtos) == 3 + 2 * 3
    assert {dto["id"] for dto in dtos} == set(ids)
    for dto in dtos:
        assert set(dto) == OPERATION_FIELDS, dto
    for answer in (listed, *single):
        assert answer.status_code == 200, answer.text
        for hidden in ("thumbs/", "unsupported_format", "deadline_exceeded", "TIFF"):
            assert hidden not in answer.text
