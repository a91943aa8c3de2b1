"""The AI worker's own gRPC calls to Workspace and Operations, spelled once.

Claims and lease mutations go through the worker SDK; these are the rest.
Every call carries the worker credential with the claimed operation's owner,
and every Workspace read the attempt's operation and lease token: a worker
reads only what the operation it runs refers to (ADR 62).
A failed call becomes the typed ``DomainError`` it stands for
(``durable_ops.rpc.errors.domain_error_from_rpc``), so the rest of the worker
never sees a gRPC status.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Protocol, TypeVar

import grpc
import structlog
from google.protobuf.message import Message

from durable_ops.ai_worker.handlers import WorkspaceReader
from durable_ops.ai_worker.prompts import SubjectText
from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.api.operations.v1 import operations_pb2_grpc as pb_grpc
from durable_ops.api.workspace.v1 import workspace_pb2 as wpb
from durable_ops.api.workspace.v1 import workspace_pb2_grpc as wpb_grpc
from durable_ops.model.errors import InvalidArgument
from durable_ops.model.provenance import Provenance
from durable_ops.model.scope import ReadLease
from durable_ops.model.states import Plan, Privacy
from durable_ops.model.subjects import SubjectKind
from durable_ops.rpc.client import Metadata, ServiceCaller, UnaryMethod, credential_accepted
from durable_ops.rpc.errors import domain_error_from_rpc
from durable_ops.rpc.subjects import read_method, read_request
from durable_ops.settings import SettingsError
from durable_ops.worker import Attempt
from durable_ops.worker.completer import retrying
from durable_ops.worker.lease import wait_set

# Unary calls are short database transactions; a stuck one must not hold a lease hostage.
CALL_TIMEOUT_SECONDS = 10.0
# The start's check of the credential touches no database; short, so a stop is not held up.
CREDENTIAL_CHECK_SECONDS = 2.0

_log = structlog.get_logger(__name__)
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


class OperationsClient:
    """The owner's view of operations (reconciling the host journal needs only that);
    claims and lease mutations go through the worker SDK (``durable_ops.worker``)."""

    def __init__(self, channel: grpc.aio.Channel, caller: ServiceCaller) -> None:
        self._channel = channel
        self._stub = pb_grpc.OperationsServiceStub(channel)
        self._caller = caller

    async def check_credential(self, stopping: asyncio.Event, poll_seconds: float) -> None:
        """Ask until the service says (or ``stopping``) whether it accepts this worker's
        credential. A refusal is a ``SettingsError`` naming the key and what to do: the
        worker exits 2 rather than claim in vain for ever."""
        accepted, waited = None, False
        while accepted is None and not stopping.is_set():
            accepted = await credential_accepted(
                self._channel, self._caller.metadata(), CREDENTIAL_CHECK_SECONDS
            )
            if accepted is None:  # unreachable or starting: the claims would wait too
                if not waited:
                    _log.info("operations_waiting", say="waiting for the Operations service")
                    waited = True
                await wait_set(stopping, poll_seconds)
        if accepted is False:
            raise self.key_refused()

    def key_refused(self) -> SettingsError:
        """What the worker says when the service refuses its key, at start or later."""
        key = self._caller.key
        return SettingsError(
            f"the Operations service refuses this worker's service key {key.path or key.name}"
            f" (kid {key.kid}): its public key is not among those the service trusts (a key"
            " from another keys folder, or a revoked one); give the worker a worker key from"
            " the services' OPS_SERVICE_KEYS_DIR (OPS_SERVICE_KEY)"
        )

    async def get(self, owner_id: str, operation_id: str) -> pb.Operation:
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
    """What the executor needs of Workspace, each read under the attempt's lease (tests
    stand in for it)."""

    async def ai_settings(self, attempt: Attempt) -> AiSettings: ...

    def reader(self, attempt: Attempt) -> WorkspaceReader: ...

    async def publish_note(
        self, attempt: Attempt, body_json: str, provenance: Provenance | None
    ) -> tuple[str, bool]: ...


class WorkspaceClient:
    def __init__(
        self,
        channel: grpc.aio.Channel,
        caller: ServiceCaller,
        *,
        stopping: asyncio.Event | None = None,  # set when the worker stops
    ) -> None:
        self._stub = wpb_grpc.WorkspaceServiceStub(channel)
        self._caller = caller
        self._stopping = stopping or asyncio.Event()

    async def ai_settings(self, attempt: Attempt) -> AiSettings:
        """The owner's settings as they are now, read under the attempt's lease."""
        lease = read_lease(attempt)
        request = wpb.GetAiSettingsRequest(operation_id=lease.operation_id, lease_token=lease.token)
        metadata = self._caller.metadata(attempt.owner_id)
        return _parse_settings(await _call(self._stub.GetAiSettings, request, metadata))

    def reader(self, attempt: Attempt) -> OwnerWorkspace:
        return OwnerWorkspace(self, attempt.owner_id, read_lease(attempt))

    async def read(
        self, owner_id: str, lease: ReadLease, kind: SubjectKind, subject_id: str
    ) -> SubjectText:
        """The texts of one of the owner's subjects, by the Workspace read its kind names,
        under ``lease``: ``NotFound`` unless the leased operation refers to it."""
        request = read_request(kind, subject_id, lease)
        reply = await _call(read_method(self._stub, kind), request, self._caller.metadata(owner_id))
        return SubjectText(kind, {field.name: getattr(reply, field.name) for field in kind.fields})

    async def publish_note(
        self, attempt: Attempt, body_json: str, provenance: Provenance | None
    ) -> tuple[str, bool]:
        """Publish the operation's note under its lease, naming the model that produced
        it; (note id, newly published).

        Idempotent per operation; ``LeaseLost`` when the lease is gone, with code
        ``cancel_requested`` when the owner cancelled first.
        """
        request = wpb.PublishNoteRequest(
            kind=attempt.task_type,
            subject_type=attempt.subject.type,
            subject_id=attempt.subject.id,
            operation_id=attempt.operation_id,
            lease_token=attempt.lease_token,
            body_json=body_json,
        )
        if provenance is not None:
            request.provider = provenance.provider
            request.model = provenance.model
            request.route = provenance.route
        metadata = self._caller.metadata(attempt.owner_id)
        # Fenced by the lease and safe to repeat (the holder's second publish answers the
        # first), so it is asked again while Workspace is away, as the SDK asks its settlements;
        # not once the worker stops (Workspace may be stopping with it): the attempt is then
        # handed back, or left to its lease.
        reply = await retrying(
            lambda: self._stub.PublishNote(
                request, metadata=metadata, timeout=CALL_TIMEOUT_SECONDS
            ),
            stopping=self._stopping,
        )
        return reply.note.id, reply.published


def read_lease(attempt: Attempt) -> ReadLease:
    """The lease the attempt reads under: its operation's, with its token."""
    return ReadLease(attempt.operation_id, attempt.lease_token)


class OwnerWorkspace:
    """The ``WorkspaceReader`` of one attempt: reads filtered by its owner, by the service,
    and by the references of the operation whose lease it holds."""

    def __init__(self, client: WorkspaceClient, owner_id: str, lease: ReadLease) -> None:
        self._client = client
        self._owner_id = owner_id
        self._lease = lease

    async def read(self, kind: SubjectKind, subject_id: str) -> SubjectText:
        return await self._client.read(self._owner_id, self._lease, kind, subject_id)
