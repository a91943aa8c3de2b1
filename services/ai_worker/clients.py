"""The worker's gRPC calls to Operations and Workspace, spelled once.

Every call carries the worker credential: without ``x-owner-id`` for the claim
(the neutral scope), with the claimed operation's owner for everything else.
A failed call becomes the typed ``DomainError`` it stands for
(``durable_ops.rpc.errors.domain_error_from_rpc``), so the rest of the worker
never sees a gRPC status.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol, TypeVar

import grpc
from google.protobuf.message import Message

from durable_ops import telemetry
from durable_ops.ai_worker.claims import ClaimedOperation, route_to_pb
from durable_ops.ai_worker.handlers import WorkspaceReader
from durable_ops.ai_worker.inference.result import Provenance
from durable_ops.ai_worker.prompts import CvText, JobText
from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.api.operations.v1 import operations_pb2_grpc as pb_grpc
from durable_ops.api.workspace.v1 import workspace_pb2 as wpb
from durable_ops.api.workspace.v1 import workspace_pb2_grpc as wpb_grpc
from durable_ops.model.availability import next_attempt_in
from durable_ops.model.errors import InvalidArgument, Unavailable
from durable_ops.model.routing import Route
from durable_ops.model.states import Plan, Privacy
from durable_ops.rpc.client import Metadata, ServiceCaller, UnaryMethod
from durable_ops.rpc.errors import domain_error_from_rpc
from durable_ops.rpc.states import state_from_pb
from durable_ops.worker.lease import LeaseStream

# Unary calls are short database transactions; a stuck one must not hold a lease hostage.
CALL_TIMEOUT_SECONDS = 10.0
FAILURE_MESSAGE_MAX = 512
# How long a lease mutation is asked again while Operations is away (a replica
# restarting, the database stalled); past it the lease has likely run out anyway.
MUTATION_RETRY_SECONDS = 30.0

RequestT = TypeVar("RequestT", bound=Message)
ResponseT = TypeVar("ResponseT", bound=Message)


async def _call(
    method: UnaryMethod[RequestT, ResponseT],
    request: RequestT,
    metadata: Metadata,
    *,
    timeout: float = CALL_TIMEOUT_SECONDS,
) -> ResponseT:
    try:
        return await method(request, metadata=metadata, timeout=timeout)
    except grpc.aio.AioRpcError as exc:
        raise domain_error_from_rpc(exc) from exc


async def _mutate(
    method: UnaryMethod[RequestT, ResponseT], request: RequestT, metadata: Metadata
) -> ResponseT:
    """A lease mutation (or the publish of its result), asked again while UNAVAILABLE.

    Safe to repeat: for the holder of the lease each one answers the state it
    reached the first time (the token is kept), so a lost answer is asked for
    again rather than the finished work thrown away with the lease.
    """
    loop = asyncio.get_running_loop()
    started = loop.time()
    failures = 0
    while True:
        try:
            return await _call(method, request, metadata)
        except Unavailable:
            failures += 1
            pause = next_attempt_in(
                failures, loop.time() - started, MUTATION_RETRY_SECONDS, random.random
            )
            if pause is None:
                raise
            await asyncio.sleep(pause)


def state_name(state: pb.OperationState.ValueType) -> str:
    """``OPERATION_STATE_WAITING_FOR_RETRY`` -> ``waiting_for_retry``, for logs."""
    return state_from_pb(state).value


def provenance_to_pb(provenance: Provenance | None) -> pb.Provenance:
    if provenance is None:
        return pb.Provenance()
    return pb.Provenance(
        provider=provenance.provider, model=provenance.model, route=provenance.route
    )


class OperationsClient:
    def __init__(self, channel: grpc.aio.Channel, caller: ServiceCaller) -> None:
        self._stub = pb_grpc.OperationsServiceStub(channel)
        self._caller = caller
        # The worker's one lease stream (``durable_ops.worker.lease``), in the neutral scope.
        self.leases = LeaseStream(lambda: self._stub.HoldLeases(metadata=caller.metadata()))

    async def claim(
        self,
        task_types: list[str],
        lease_seconds: int,
        routes: Sequence[Route],
        *,
        wait_seconds: float = 0.0,
    ) -> ClaimedOperation | None:
        """Claim for any of ``routes`` (tried in this order), waiting up to ``wait_seconds``."""
        request = pb.ClaimOperationRequest(
            task_types=task_types,
            lease_seconds=lease_seconds,
            routes=[route_to_pb(route) for route in routes],
        )
        request.wait.FromTimedelta(timedelta(seconds=wait_seconds))
        # A trace of its own, linked (once the reply names it) to the request that created the work.
        with telemetry.span("ai_worker.claim", root=True) as span:
            reply = await _call(
                self._stub.ClaimOperation,
                request,
                self._caller.metadata(),
                timeout=wait_seconds + CALL_TIMEOUT_SECONDS,
            )
            if not reply.HasField("claimed"):
                return None
            claimed = ClaimedOperation.from_pb(reply.claimed)
            span.set_attribute(telemetry.OPERATION_ID, claimed.operation_id)
            telemetry.add_link(span, claimed.trace_parent)
        return claimed

    async def complete(self, op: ClaimedOperation, provenance: Provenance, result_ref: str) -> str:
        request = pb.CompleteOperationRequest(
            operation_id=op.operation_id,
            lease_token=op.lease_token,
            provenance=provenance_to_pb(provenance),
            result_ref=result_ref,
        )
        reply = await _mutate(
            self._stub.CompleteOperation, request, self._caller.metadata(op.owner_id)
        )
        return state_name(reply.state)

    async def fail(
        self,
        op: ClaimedOperation,
        *,
        retryable: bool,
        code: str,
        message: str,
        provenance: Provenance | None,
    ) -> str:
        request = pb.FailOperationRequest(
            operation_id=op.operation_id,
            lease_token=op.lease_token,
            retryable=retryable,
            failure_code=code,
            failure_message=message[:FAILURE_MESSAGE_MAX],
            provenance=provenance_to_pb(provenance),
        )
        reply = await _mutate(self._stub.FailOperation, request, self._caller.metadata(op.owner_id))
        return state_name(reply.state)

    async def request_external_fallback(
        self, op: ClaimedOperation, provenance: Provenance | None
    ) -> str:
        request = pb.RequestExternalFallbackRequest(
            operation_id=op.operation_id,
            lease_token=op.lease_token,
            provenance=provenance_to_pb(provenance),
        )
        reply = await _mutate(
            self._stub.RequestExternalFallback, request, self._caller.metadata(op.owner_id)
        )
        return state_name(reply.state)

    async def acknowledge_cancellation(self, op: ClaimedOperation) -> str:
        request = pb.AcknowledgeCancellationRequest(
            operation_id=op.operation_id, lease_token=op.lease_token
        )
        reply = await _mutate(
            self._stub.AcknowledgeCancellation, request, self._caller.metadata(op.owner_id)
        )
        return state_name(reply.state)

    async def get(self, owner_id: str, operation_id: str) -> pb.Operation:
        """The owner's view of an operation (reconciling the host journal needs only that)."""
        request = pb.GetOperationRequest(operation_id=operation_id)
        reply: pb.Operation = await _call(
            self._stub.GetOperation, request, self._caller.metadata(owner_id)
        )
        return reply


@dataclass(frozen=True)
class AiSettings:
    ai_enabled: bool
    privacy: Privacy
    plan: Plan


def _parse_settings(reply: wpb.AiSettings) -> AiSettings:
    try:
        return AiSettings(reply.ai_enabled, Privacy(reply.privacy), Plan(reply.plan))
    except ValueError:
        raise InvalidArgument("ai_settings", "the workspace answered unknown values") from None


class WorkspaceCalls(Protocol):
    """What the executor needs of Workspace (tests stand in for it)."""

    async def ai_settings(self, owner_id: str) -> AiSettings: ...

    def reader(self, owner_id: str) -> WorkspaceReader: ...

    async def publish_note(self, op: ClaimedOperation, body_json: str) -> tuple[str, bool]: ...


class WorkspaceClient:
    def __init__(self, channel: grpc.aio.Channel, caller: ServiceCaller) -> None:
        self._stub = wpb_grpc.WorkspaceServiceStub(channel)
        self._caller = caller

    async def ai_settings(self, owner_id: str) -> AiSettings:
        reply = await _call(
            self._stub.GetAiSettings, wpb.GetAiSettingsRequest(), self._caller.metadata(owner_id)
        )
        return _parse_settings(reply)

    def reader(self, owner_id: str) -> OwnerWorkspace:
        return OwnerWorkspace(self, owner_id)

    async def job(self, owner_id: str, job_id: str) -> JobText:
        request = wpb.GetJobRequest(job_id=job_id)
        job = await _call(self._stub.GetJob, request, self._caller.metadata(owner_id))
        return JobText(title=job.title, company=job.company, description=job.description)

    async def cv(self, owner_id: str, attachment_id: str) -> CvText:
        request = wpb.GetAttachmentRequest(attachment_id=attachment_id)
        attachment = await _call(self._stub.GetAttachment, request, self._caller.metadata(owner_id))
        return CvText(text=attachment.text)

    async def publish_note(self, op: ClaimedOperation, body_json: str) -> tuple[str, bool]:
        """Publish the operation's note under its lease; (note id, newly published).

        Idempotent per operation; ``LeaseLost`` when the lease is gone, with code
        ``cancel_requested`` when the owner cancelled first.
        """
        request = wpb.PublishNoteRequest(
            kind=op.task_type,
            subject_type=op.subject_type,
            subject_id=op.subject_id,
            operation_id=op.operation_id,
            lease_token=op.lease_token,
            body_json=body_json,
        )
        reply = await _mutate(self._stub.PublishNote, request, self._caller.metadata(op.owner_id))
        return reply.note.id, reply.published


class OwnerWorkspace:
    """The ``WorkspaceReader`` of one owner: reads filtered by that owner, by the service."""

    def __init__(self, client: WorkspaceClient, owner_id: str) -> None:
        self._client = client
        self._owner_id = owner_id

    async def job(self, job_id: str) -> JobText:
        return await self._client.job(self._owner_id, job_id)

    async def cv(self, attachment_id: str) -> CvText:
        return await self._client.cv(self._owner_id, attachment_id)
