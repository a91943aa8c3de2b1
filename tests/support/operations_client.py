"""Small synchronous helpers over the Operations and Notifications stubs.

The acceptance tests talk to real servers (``tests.support.grpc_services``);
these helpers only spell the common calls once: create, claim, one heartbeat,
complete, fail, plus assertions on failed calls and reads of the database.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import grpc
from google.protobuf.timestamp_pb2 import Timestamp
from sqlalchemy import func, select

from durable_ops.api.notifications.v1 import notifications_pb2 as npb
from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.model.scope import Role
from durable_ops.storage.schema import UserNotification, UserOperation
from tests.support import stored
from tests.support.grpc_services import Services, metadata

TASK = "strategy.snapshot"
OTHER_TASK = "cv.review"
ALICE = "alice"
BOB = "bob"
OWNER_IDS = ("alice", "bob", "carol", "dave")
LEASE_SECONDS = 30
Metadata = tuple[tuple[str, str], ...]

QUEUED = pb.OPERATION_STATE_QUEUED
RUNNING = pb.OPERATION_STATE_RUNNING
WAITING_FOR_RETRY = pb.OPERATION_STATE_WAITING_FOR_RETRY
SUCCEEDED = pb.OPERATION_STATE_SUCCEEDED
FAILED = pb.OPERATION_STATE_FAILED
CANCELLED = pb.OPERATION_STATE_CANCELLED


def timestamp(value: datetime) -> Timestamp:
    stamp = Timestamp()
    stamp.FromDatetime(value)
    return stamp


@dataclass(frozen=True)
class RpcFailure:
    """What a failed call answered: status, details and the error trailers."""

    code: grpc.StatusCode
    details: str
    trailers: dict[str, str]

    @property
    def error_code(self) -> str | None:
        return self.trailers.get("x-error-code")

    @property
    def error_field(self) -> str | None:
        return self.trailers.get("x-error-field")


def failure_of(error: grpc.RpcError) -> RpcFailure:
    call: Any = error
    trailers = {str(key).lower(): str(value) for key, value in call.trailing_metadata() or ()}
    return RpcFailure(call.code(), call.details() or "", trailers)


def rpc_failure(call: Callable[[], object]) -> RpcFailure:
    """Run ``call`` and return how it failed; fail the test if it succeeded."""
    try:
        result = call()
    except grpc.RpcError as error:
        return failure_of(error)
    raise AssertionError(f"the call was expected to fail but answered {result!r}")


def expect_failure(
    call: Callable[[], object],
    code: grpc.StatusCode,
    error_code: str | None = None,
    *,
    field: str | None = None,
) -> RpcFailure:
    failure = rpc_failure(call)
    assert failure.code == code, failure
    if error_code is not None:
        assert failure.error_code == error_code, failure
    if field is not None:
        assert failure.error_field == field, failure
    return failure


@dataclass(frozen=True)
class Lease:
    """A claimed operation as a worker holds it."""

    operation: pb.Operation
    owner: str
    token: str

    @property
    def id(self) -> str:
        return self.operation.id


class HeartbeatStream:
    """One open Heartbeat stream, fed from a queue: ``beat`` sends one and waits for its answer.

    Messages the service pushed unasked are kept in ``pushed``; ``read`` takes
    the next message of either kind.
    """

    _CLOSE = object()

    def __init__(self, client: OpsClient, lease: Lease) -> None:
        self._requests: queue.Queue[object] = queue.Queue()
        self.lease = lease
        self._responses: Iterator[pb.HeartbeatResponse] = client.stub.Heartbeat(
            self._iterate(), metadata=client.worker_for(lease.owner)
        )
        self._first = True
        self.pushed: list[pb.HeartbeatResponse] = []

    def _iterate(self) -> Iterator[pb.HeartbeatRequest]:
        while True:
            item = self._requests.get()
            if item is self._CLOSE:
                return
            assert isinstance(item, pb.HeartbeatRequest)
            yield item

    def beat(
        self, *, progress: int | None = None, lease_seconds: int = LEASE_SECONDS
    ) -> pb.HeartbeatResponse:
        request = pb.HeartbeatRequest(lease_seconds=lease_seconds)
        if self._first:
            request.operation_id = self.lease.id
            request.lease_token = self.lease.token
            self._first = False
        if progress is not None:
            request.progress_percent = progress
        self._requests.put(request)
        while (answer := self.read()).pushed:
            self.pushed.append(answer)
        return answer

    def read(self) -> pb.HeartbeatResponse:
        return next(self._responses)

    def close(self) -> None:
        """Half-close and drain: the server ends the call with OK."""
        self._requests.put(self._CLOSE)
        leftover = list(self._responses)
        assert leftover == []
        call: Any = self._responses
        assert call.code() == grpc.StatusCode.OK


class LeaseStream:
    """One open HoldLeases stream in the neutral worker scope, fed from a queue.

    ``beat`` sends one request and waits for its answer; messages the service
    pushed unasked are kept in ``pushed``; ``read`` takes the next message of
    either kind.
    """

    _CLOSE = object()

    def __init__(self, client: OpsClient, md: Metadata | None = None) -> None:
        self._requests: queue.Queue[object] = queue.Queue()
        self._responses: Iterator[pb.HoldLeasesResponse] = client.stub.HoldLeases(
            self._iterate(), metadata=client.neutral if md is None else md
        )
        self.pushed: list[pb.HoldLeasesResponse] = []

    def _iterate(self) -> Iterator[pb.HoldLeasesRequest]:
        while True:
            item = self._requests.get()
            if item is self._CLOSE:
                return
            assert isinstance(item, pb.HoldLeasesRequest)
            yield item

    def beat(
        self,
        add: tuple[Lease, ...] = (),
        *,
        progress: dict[str, int] | None = None,
        dropped: tuple[str, ...] = (),
        lease_seconds: int = LEASE_SECONDS,
    ) -> dict[str, pb.HoldLeasesResponse.Outcome]:
        """Send one beat; its outcomes by operation id."""
        leases = [
            pb.HeldLease(
                operation_id=lease.id,
                owner_id=lease.owner,
                lease_token=lease.token,
                lease_seconds=lease_seconds,
            )
            for lease in add
        ]
        named = {lease.operation_id: lease for lease in leases}
        for operation_id, percent in (progress or {}).items():
            entry = named.get(operation_id)
            if entry is None:
                entry = pb.HeldLease(operation_id=operation_id)
                leases.append(entry)
            entry.progress_percent = percent
        self._requests.put(pb.HoldLeasesRequest(leases=leases, dropped=list(dropped)))
        while (answer := self.read()).pushed:
            self.pushed.append(answer)
        return {outcome.operation_id: outcome for outcome in answer.outcomes}

    def send(self, request: pb.HoldLeasesRequest) -> None:
        self._requests.put(request)

    def read(self) -> pb.HoldLeasesResponse:
        return next(self._responses)

    def close(self) -> None:
        """Half-close and drain: the server ends the call with OK."""
        self._requests.put(self._CLOSE)
        leftover = list(self._responses)
        assert all(message.pushed for message in leftover), leftover
        call: Any = self._responses
        assert call.code() == grpc.StatusCode.OK


class OpsClient:
    """Typed shortcuts over ``services.operations`` / ``services.notifications``."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.stub = services.operations
        self.notices = services.notifications
        self._metadata: dict[tuple[Role, str | None], Metadata] = {}
        self._lock = threading.Lock()

    # ---- credentials --------------------------------------------------------------------

    def md(self, role: Role, owner: str | None = None) -> Metadata:
        with self._lock:
            key = (role, owner)
            if key not in self._metadata:
                self._metadata[key] = metadata(role, owner)
            return self._metadata[key]

    def gateway(self, owner: str) -> Metadata:
        return self.md(Role.GATEWAY, owner)

    def worker_for(self, owner: str) -> Metadata:
        return self.md(Role.WORKER, owner)

    @property
    def neutral(self) -> Metadata:
        return self.md(Role.WORKER)

    # ---- owner scope ----------------------------------------------------------------------

    def create_request(
        self,
        key: str,
        *,
        task_type: str = TASK,
        subject_type: str = "job",
        subject_id: str = "job-1",
        priority: int = 0,
        max_attempts: int = 3,
        retry_delay_seconds: int = 30,
        deadline: datetime | None = None,
        not_before: datetime | None = None,
    ) -> pb.CreateOperationRequest:
        request = pb.CreateOperationRequest(
            task_type=task_type,
            idempotency_key=key,
            subject=pb.Subject(type=subject_type, id=subject_id),
            priority=priority,
            max_attempts=max_attempts,
            retry_delay_seconds=retry_delay_seconds,
        )
        if deadline is not None:
            request.deadline.CopyFrom(timestamp(deadline))
        if not_before is not None:
            request.not_before.CopyFrom(timestamp(not_before))
        return request

    def create_raw(
        self, owner: str, request: pb.CreateOperationRequest
    ) -> pb.CreateOperationResponse:
        response: pb.CreateOperationResponse = self.stub.CreateOperation(
            request, metadata=self.gateway(owner)
        )
        return response

    def create(self, owner: str, key: str, **fields: Any) -> pb.Operation:
        response = self.create_raw(owner, self.create_request(key, **fields))
        assert response.created, f"{key} already existed"
        return response.operation

    def get(self, owner: str, operation_id: str) -> pb.Operation:
        found: pb.Operation = self.stub.GetOperation(
            pb.GetOperationRequest(operation_id=operation_id), metadata=self.gateway(owner)
        )
        return found

    def list_page(self, owner: str, **fields: Any) -> pb.ListOperationsResponse:
        page: pb.ListOperationsResponse = self.stub.ListOperations(
            pb.ListOperationsRequest(**fields), metadata=self.gateway(owner)
        )
        return page

    def cancel(self, owner: str, operation_id: str) -> pb.Operation:
        found: pb.Operation = self.stub.CancelOperation(
            pb.CancelOperationRequest(operation_id=operation_id), metadata=self.gateway(owner)
        )
        return found

    def retry(self, owner: str, operation_id: str) -> pb.Operation:
        found: pb.Operation = self.stub.RetryOperation(
            pb.RetryOperationRequest(operation_id=operation_id), metadata=self.gateway(owner)
        )
        return found

    # ---- the worker -----------------------------------------------------------------------

    def claim(
        self,
        task_types: tuple[str, ...] = (TASK,),
        lease_seconds: int = LEASE_SECONDS,
        *,
        md: Metadata | None = None,
        wait_seconds: float | None = None,
    ) -> Lease | None:
        request = pb.ClaimOperationRequest(task_types=list(task_types), lease_seconds=lease_seconds)
        if wait_seconds is not None:
            request.wait.FromTimedelta(timedelta(seconds=wait_seconds))
        response: pb.ClaimOperationResponse = self.stub.ClaimOperation(
            request,
            metadata=self.neutral if md is None else md,
            timeout=(wait_seconds or 0) + 30,
        )
        if not response.HasField("claimed"):
            return None
        claimed = response.claimed
        assert len(claimed.lease_token) >= 22  # ≥ 128 bits, url-safe base64
        return Lease(claimed.operation, claimed.owner_id, claimed.lease_token)

    def claim_one(
        self, task_types: tuple[str, ...] = (TASK,), lease_seconds: int = LEASE_SECONDS
    ) -> Lease:
        lease = self.claim(task_types, lease_seconds)
        assert lease is not None, "nothing was claimable"
        return lease

    def heartbeat_once(
        self,
        lease: Lease,
        *,
        progress: int | None = None,
        lease_seconds: int = LEASE_SECONDS,
        token: str | None = None,
        md: Metadata | None = None,
    ) -> pb.HeartbeatResponse:
        """Open a stream, send one heartbeat, read its answer, half-close.

        A cancel pushed before the stream closed shows as ``cancel_requested``.
        """
        request = pb.HeartbeatRequest(
            operation_id=lease.id,
            lease_token=lease.token if token is None else token,
            lease_seconds=lease_seconds,
        )
        if progress is not None:
            request.progress_percent = progress
        responses: list[pb.HeartbeatResponse] = list(
            self.stub.Heartbeat(
                iter([request]), metadata=self.worker_for(lease.owner) if md is None else md
            )
        )
        # The beat's answer, then at most the pushed cancel, when the owner's cancel
        # commits while this short stream is still open (the live lease channel).
        beat, *pushed = responses
        assert len(pushed) <= 1
        assert all(push.pushed and push.cancel_requested for push in pushed), pushed
        if pushed:
            beat.cancel_requested = True
        return beat

    def stream(self, lease: Lease) -> HeartbeatStream:
        return HeartbeatStream(self, lease)

    def lease_stream(self, md: Metadata | None = None) -> LeaseStream:
        return LeaseStream(self, md)

    def complete(
        self,
        lease: Lease,
        *,
        token: str | None = None,
        md: Metadata | None = None,
        provenance: pb.Provenance | None = None,
    ) -> int:
        response: pb.LeaseMutationResponse = self.stub.CompleteOperation(
            pb.CompleteOperationRequest(
                operation_id=lease.id,
                lease_token=lease.token if token is None else token,
                provenance=provenance,
            ),
            metadata=self.worker_for(lease.owner) if md is None else md,
        )
        return int(response.state)

    def fail(
        self,
        lease: Lease,
        *,
        retryable: bool,
        code: str = "model_error",
        message: str = "",
        provenance: pb.Provenance | None = None,
        md: Metadata | None = None,
        retry_after: timedelta | None = None,
    ) -> int:
        request = pb.FailOperationRequest(
            operation_id=lease.id,
            lease_token=lease.token,
            retryable=retryable,
            failure_code=code,
            failure_message=message,
            provenance=provenance,
        )
        if retry_after is not None:
            request.retry_after.FromTimedelta(retry_after)
        response: pb.LeaseMutationResponse = self.stub.FailOperation(
            request, metadata=self.worker_for(lease.owner) if md is None else md
        )
        return int(response.state)

    def acknowledge_cancel(self, lease: Lease) -> int:
        response: pb.LeaseMutationResponse = self.stub.AcknowledgeCancellation(
            pb.AcknowledgeCancellationRequest(operation_id=lease.id, lease_token=lease.token),
            metadata=self.worker_for(lease.owner),
        )
        return int(response.state)

    # ---- notifications --------------------------------------------------------------------

    def notifications_page(
        self, owner: str, page_size: int = 0, page_token: str = ""
    ) -> npb.ListNotificationsResponse:
        page: npb.ListNotificationsResponse = self.notices.ListNotifications(
            npb.ListNotificationsRequest(page_size=page_size, page_token=page_token),
            metadata=self.gateway(owner),
        )
        return page

    def all_notifications(self, owner: str) -> list[npb.Notification]:
        found: list[npb.Notification] = []
        token = ""
        while True:
            page = self.notifications_page(owner, 100, token)
            found.extend(page.notifications)
            token = page.next_page_token
            if not token:
                return found

    def unread(self, owner: str) -> int:
        response: npb.GetUnreadCountResponse = self.notices.GetUnreadCount(
            npb.GetUnreadCountRequest(), metadata=self.gateway(owner)
        )
        return int(response.count)

    # ---- the database, read directly --------------------------------------------------------

    def row(self, operation_id: str) -> UserOperation:
        found = stored.operation(self.services.db, operation_id)
        assert found is not None
        return found

    def notification_rows(self, operation_id: str) -> list[UserNotification]:
        of_it = UserNotification.operation_id == operation_id
        found = stored.rows(self.services.db, select(UserNotification).where(of_it))
        return [UserNotification(**row._mapping) for row in found]

    def notifications_per_operation(self) -> dict[str | None, int]:
        rows = stored.rows(
            self.services.db,
            select(UserNotification.operation_id, func.count()).group_by(
                UserNotification.operation_id
            ),
        )
        return {operation_id: int(count) for operation_id, count in rows}

    def state_counts(self) -> dict[str, int]:
        query = select(UserOperation.state, func.count()).group_by(UserOperation.state)
        rows = stored.rows(self.services.db, query)
        return {state: int(count) for state, count in rows}


def later(services: Services, seconds: float) -> datetime:
    return services.clock() + timedelta(seconds=seconds)
