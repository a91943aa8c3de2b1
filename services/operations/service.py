"""The Operations gRPC servicer: scope checks, message conversion, one transaction.

Each method names the scope it runs in, converts the request, runs one storage
call in one transaction (owner-scoped unless it is the claim) and converts the
answer. Rules live in ``durable_ops.model``; SQL in ``durable_ops.storage``.

Four calls stay open: a waiting claim (``ClaimWaiters``), the heartbeat
stream of one lease and the lease stream of a worker (``HoldLeases``), which
also push the owner's cancel (``CancelWatch``), and a wait for an operation to
end or move (``OperationWatch``). All are woken at once by what this replica
commits and by one shared poll each for the rest.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from datetime import datetime

import structlog
from google.longrunning import operations_proto_pb2 as lro

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.api.operations.v1 import operations_pb2_grpc as pb_grpc
from durable_ops.clock import Clock
from durable_ops.model import bounds, held_leases, lifecycle
from durable_ops.model.errors import DomainError, InvalidArgument
from durable_ops.model.held_leases import HeldLease, HeldLeases
from durable_ops.model.lifecycle import Event
from durable_ops.model.scope import require_neutral_worker, require_owner, require_worker_owner
from durable_ops.model.states import OperationState
from durable_ops.operations.cancel_watch import CancelWatch
from durable_ops.operations.claim_waiters import ClaimWaiters, Kind
from durable_ops.operations.heartbeat_stream import BeatReader, Pushed
from durable_ops.operations.metrics import OperationsMetrics
from durable_ops.operations.operation_watch import OperationWatch
from durable_ops.operations.row_watch import Watch
from durable_ops.rpc import ServicerContext
from durable_ops.rpc.errors import status_for
from durable_ops.rpc.scope import caller_scope
from durable_ops.settings import Settings
from durable_ops.storage import operations, retention
from durable_ops.storage.db import Database
from durable_ops.storage.operations import CLAIM_BATCH_MAX
from durable_ops.storage.pages import Page
from durable_ops.storage.schema import UserOperation
from durable_ops.storage.tx import Tx
from durable_ops.telemetry import current_traceparent
from durable_ops.wire import operations as convert

log = structlog.get_logger(__name__)
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["OperationsService"].full_name
DEFAULT_HEARTBEAT_LEASE_SECONDS = held_leases.DEFAULT_LEASE_SECONDS
_DEFAULTS = Settings()  # the poll intervals of a servicer built without its own
WaitRequest = pb.WaitOperationRequest | lro.WaitOperationRequest


def _provenance(message: pb.Provenance) -> operations.Provenance:
    return operations.Provenance(message.provider, message.model, message.route)


def _completion(owner: str, request: pb.CompleteOperationRequest) -> operations.Settlement:
    return operations.Settlement(
        owner_id=owner,
        operation_id=request.operation_id,
        token=request.lease_token,
        event=Event.COMPLETE,
        provenance=_provenance(request.provenance),
        result_ref=request.result_ref,
    )


def _failure(owner: str, request: pb.FailOperationRequest) -> operations.Settlement:
    return operations.Settlement(
        owner_id=owner,
        operation_id=request.operation_id,
        token=request.lease_token,
        event=Event.FAIL_RETRYABLE if request.retryable else Event.FAIL_PERMANENT,
        provenance=_provenance(request.provenance),
        failure_code=request.failure_code,
        failure_message=request.failure_message,
    )


def _deadline(request: pb.CreateOperationRequest) -> datetime | None:
    """The optional deadline; a Timestamp outside its own valid range is the caller's error."""
    if not request.HasField("deadline"):
        return None
    try:
        return convert.from_timestamp(request.deadline)
    except ValueError:  # seconds outside years 1 to 9999, or nanos out of range
        raise InvalidArgument("deadline", "is not a valid timestamp") from None


def _seen(request: pb.WaitOperationRequest) -> datetime | None:
    if not request.HasField("seen_updated_at"):
        return None
    try:
        return convert.from_timestamp(request.seen_updated_at)
    except ValueError:
        raise InvalidArgument("seen_updated_at", "is not a valid timestamp") from None


def wait_seconds(request: WaitRequest) -> float:
    """The timeout asked for, at most the server's; unset means the server's."""
    if not request.HasField("timeout"):
        return bounds.WAIT_SECONDS_MAX
    seconds: float = request.timeout.ToTimedelta().total_seconds()
    if seconds < 0:
        raise InvalidArgument("timeout", "must not be negative")
    return min(seconds, bounds.WAIT_SECONDS_MAX)


def _state_reply(state: str) -> pb.LeaseMutationResponse:
    return pb.LeaseMutationResponse(state=convert.state_to_pb(state))


def _claim_wait_seconds(request: pb.ClaimOperationRequest | pb.ClaimOperationsRequest) -> float:
    if not request.HasField("wait"):
        return 0.0
    seconds = request.wait.ToTimedelta().total_seconds()
    if not 0 <= seconds <= bounds.CLAIM_WAIT_SECONDS_MAX:
        raise InvalidArgument("wait", f"must be 0 to {bounds.CLAIM_WAIT_SECONDS_MAX} seconds")
    return seconds


def _names_only(beat: pb.HeartbeatRequest, operation_id: str, token: str) -> bool:
    """A later beat may leave the lease out, or repeat it; it may not name another."""
    return beat.operation_id in ("", operation_id) and beat.lease_token in ("", token)


def _entries(request: pb.HoldLeasesRequest) -> list[held_leases.Entry]:
    return [
        held_leases.Entry(
            operation_id=lease.operation_id,
            owner_id=lease.owner_id,
            token=lease.lease_token,
            lease_seconds=lease.lease_seconds,
            progress=lease.progress_percent if lease.HasField("progress_percent") else None,
        )
        for lease in request.leases
    ]


def _refusal(operation_id: str, error: DomainError) -> pb.HoldLeasesResponse.Outcome:
    return pb.HoldLeasesResponse.Outcome(
        operation_id=operation_id,
        status_code=status_for(error).value[0],
        error_code=error.code,
        message=error.message,
    )


def _claim_source(route: pb.Route.ValueType) -> OperationState:
    event = Event.CLAIM_EXTERNAL if route == pb.ROUTE_EXTERNAL else Event.CLAIM
    return lifecycle.CLAIMS[event].source


class OperationsService(pb_grpc.OperationsServiceServicer):
    def __init__(
        self,
        db: Database,
        clock: Clock,
        *,
        cancels: CancelWatch | None = None,
        claims: ClaimWaiters | None = None,
        watch: OperationWatch | None = None,
        metrics: OperationsMetrics | None = None,
    ) -> None:
        self._db = db
        self.metrics = metrics
        self._clock = clock
        self.cancels = cancels or CancelWatch(db, _DEFAULTS.cancel_watch_interval_seconds)
        self.claims = claims or ClaimWaiters.from_settings(db, clock, _DEFAULTS)
        self.watch = watch or OperationWatch(db, _DEFAULTS.done_watch_interval_seconds)

    async def close(self) -> None:
        await self.cancels.close()
        await self.claims.close()
        await self.watch.close()

    @property
    def db(self) -> Database:
        return self._db

    @property
    def clock(self) -> Clock:
        return self._clock

    # ---- the owner's reads and cancel, shared with google.longrunning.Operations -------

    async def get_for(self, owner: str, operation_id: str) -> UserOperation:
        return await self._db.run_core_async(
            lambda tx: operations.get(tx, operation_id), owner_id=owner, write=False, short=True
        )

    async def wait_for(
        self, owner: str, operation_id: str, seconds: float, seen: datetime | None = None
    ) -> UserOperation:
        """The operation once it is done, or differs from ``seen``, or after ``seconds``."""
        loop = asyncio.get_running_loop()
        give_up_at = loop.time() + seconds
        # Registered before the first read, so a change between the read and the wait wakes it.
        with self.watch.watching(operation_id, seen) as changed:
            while True:
                changed.clear()
                row = await self.get_for(owner, operation_id)
                left = give_up_at - loop.time()
                moved = seen is not None and row.updated_at != seen
                if OperationState(row.state).is_terminal or moved or left <= 0:
                    return row
                try:
                    async with asyncio.timeout(left):
                        await changed.wait()
                except TimeoutError:
                    return await self.get_for(owner, operation_id)

    async def list_for(
        self, owner: str, *, size: int, token: str, state: OperationState | None, task_type: str
    ) -> Page[UserOperation]:
        return await self._db.run_core_async(
            lambda tx: operations.list_page(
                tx, size=size, token=token, state=state, task_type=task_type
            ),
            owner_id=owner,
            write=False,
        )

    async def cancel_for(self, owner: str, operation_id: str) -> UserOperation:
        now = self._clock()
        row = await self._db.run_core_async(
            lambda tx: operations.cancel(tx, operation_id, now), owner_id=owner, short=True
        )
        log.info("operation_cancel", operation_id=row.id, owner=owner, state=row.state)
        return row

    async def delete_for(self, owner: str, operation_id: str) -> None:
        """The owner's finished operation removed; its tombstone keeps the key (ADR 0021)."""
        now = self._clock()
        await self._db.run_core_async(
            lambda tx: retention.delete_finished(tx, operation_id, now), owner_id=owner
        )
        log.info("operation_delete", operation_id=operation_id, owner=owner)

    # ---- owner scope ------------------------------------------------------------------

    async def CreateOperation(
        self, request: pb.CreateOperationRequest, context: ServicerContext
    ) -> pb.CreateOperationResponse:
        owner = require_owner(caller_scope(context)).owner_id
        create = operations.CreateRequest(
            task_type=request.task_type,
            idempotency_key=request.idempotency_key,
            subject_type=request.subject.type,
            subject_id=request.subject.id,
            priority=request.priority,
            max_attempts=request.max_attempts or 3,
            retry_delay_seconds=request.retry_delay_seconds or bounds.DEFAULT_RETRY_DELAY_SECONDS,
            privacy=convert.privacy_from_pb(request.privacy),
            context_ref=request.context_ref,
            deadline_at=_deadline(request),
            trace_parent=current_traceparent(),
        )
        now = self._clock()
        row, created = await self._db.run_core_async(
            lambda tx: operations.create(tx, create, now), owner_id=owner, short=True
        )
        if created:
            log.info("operation_created", operation_id=row.id, owner=owner, task_type=row.task_type)
        return pb.CreateOperationResponse(operation=convert.operation(row), created=created)

    async def GetOperation(
        self, request: pb.GetOperationRequest, context: ServicerContext
    ) -> pb.Operation:
        owner = require_owner(caller_scope(context)).owner_id
        return convert.operation(await self.get_for(owner, request.operation_id))

    async def WaitOperation(
        self, request: pb.WaitOperationRequest, context: ServicerContext
    ) -> pb.Operation:
        owner = require_owner(caller_scope(context)).owner_id
        seen = _seen(request)
        seconds = wait_seconds(request)
        return convert.operation(await self.wait_for(owner, request.operation_id, seconds, seen))

    async def ListOperations(
        self, request: pb.ListOperationsRequest, context: ServicerContext
    ) -> pb.ListOperationsResponse:
        owner = require_owner(caller_scope(context)).owner_id
        page = await self.list_for(
            owner,
            size=request.page_size,
            token=request.page_token,
            state=convert.state_from_pb(request.state),
            task_type=request.task_type,
        )
        return pb.ListOperationsResponse(
            operations=[convert.operation(row) for row in page.items],
            next_page_token=page.next_token or "",
        )

    async def CancelOperation(
        self, request: pb.CancelOperationRequest, context: ServicerContext
    ) -> pb.Operation:
        owner = require_owner(caller_scope(context)).owner_id
        return convert.operation(await self.cancel_for(owner, request.operation_id))

    async def RetryOperation(
        self, request: pb.RetryOperationRequest, context: ServicerContext
    ) -> pb.Operation:
        owner = require_owner(caller_scope(context)).owner_id
        now = self._clock()
        row = await self._db.run_core_async(
            lambda tx: operations.retry(tx, request.operation_id, now), owner_id=owner, short=True
        )
        log.info("operation_retried", operation_id=row.id, owner=owner)
        return convert.operation(row)

    # ---- neutral worker scope -----------------------------------------------------------

    async def ClaimOperation(
        self, request: pb.ClaimOperationRequest, context: ServicerContext
    ) -> pb.ClaimOperationResponse:
        require_neutral_worker(caller_scope(context))
        routes = list(dict.fromkeys(request.routes)) or [request.route]
        claimed = await self._claim(
            request.task_types, request.lease_seconds, routes, _claim_wait_seconds(request), 1
        )
        if not claimed:
            return pb.ClaimOperationResponse()
        log.info(
            "operation_claimed",
            operation_id=claimed[0].operation.id,
            owner=claimed[0].owner_id,
            attempt=claimed[0].operation.attempt,
        )
        return pb.ClaimOperationResponse(claimed=claimed[0])

    async def ClaimOperations(
        self, request: pb.ClaimOperationsRequest, context: ServicerContext
    ) -> pb.ClaimOperationsResponse:
        require_neutral_worker(caller_scope(context))
        limit = bounds.int_range("max_operations", request.max_operations, (1, CLAIM_BATCH_MAX))
        routes = list(dict.fromkeys(request.routes)) or [pb.ROUTE_LOCAL]
        claimed = await self._claim(
            request.task_types, request.lease_seconds, routes, _claim_wait_seconds(request), limit
        )
        if claimed:
            log.info("operations_claimed", count=len(claimed))
        return pb.ClaimOperationsResponse(claimed=claimed)

    async def _claim(
        self,
        names: Sequence[str],
        lease_seconds: int,
        routes: list[pb.Route.ValueType],
        wait: float,
        limit: int,
    ) -> list[pb.ClaimedOperation]:
        """Up to ``limit`` claims over ``routes`` in order, in one transaction; waits up
        to ``wait`` seconds for the first, woken by this replica's claim waiters. One
        claim transaction runs at a time on the replica (ADR 0024)."""
        task_types = [bounds.task_type(name) for name in names]
        kinds: frozenset[Kind] = frozenset(
            (_claim_source(route).value, name) for route in routes for name in task_types
        )

        def take(tx: Tx) -> list[tuple[operations.Claim, pb.Route.ValueType]]:
            now = self._clock()
            found: list[tuple[operations.Claim, pb.Route.ValueType]] = []
            for route in routes:
                external = route == pb.ROUTE_EXTERNAL
                batch = operations.claim(
                    tx,
                    task_types,
                    lease_seconds,
                    now,
                    limit=limit - len(found),
                    external_route=external,
                )
                found += [
                    (claim, pb.ROUTE_EXTERNAL if external else pb.ROUTE_LOCAL) for claim in batch
                ]
                if len(found) == limit:
                    break
            return found

        loop = asyncio.get_running_loop()
        give_up_at = loop.time() + wait
        with self.claims.waiting(kinds, limit) as waiter:
            while True:
                async with self.claims.turn():
                    waiter.trying()
                    found = await self._db.run_core_async(take, owner_id=None, short=True)
                    self.claims.took(waiter, len(found))
                left = give_up_at - loop.time()
                if found or left <= 0 or not task_types or not await waiter.wait(left):
                    break
        return [self._claimed(claim, route) for claim, route in found]

    def _claimed(self, claim: operations.Claim, route: pb.Route.ValueType) -> pb.ClaimedOperation:
        row = claim.operation
        if self.metrics is not None:
            self.metrics.claimed(
                row.task_type, "external" if route == pb.ROUTE_EXTERNAL else "local"
            )
        assert row.lease_expires_at is not None
        return pb.ClaimedOperation(
            operation=convert.operation(row),
            owner_id=row.owner_user_id,
            lease_token=claim.lease_token,
            lease_expires_at=convert.timestamp(row.lease_expires_at),
            privacy=convert.privacy_to_pb(row.privacy),
            context_ref=row.context_ref or "",
            route=route,
            trace_parent=row.trace_parent or "",
        )

    async def CompleteOperations(
        self, request: pb.CompleteOperationsRequest, context: ServicerContext
    ) -> pb.LeaseMutationsResponse:
        require_neutral_worker(caller_scope(context))
        settlements = [_completion(item.owner_id, item.completion) for item in request.items]
        answers = await self._settle(settlements, owner=None)
        return self._outcomes(settlements, answers, "operations_completed")

    async def FailOperations(
        self, request: pb.FailOperationsRequest, context: ServicerContext
    ) -> pb.LeaseMutationsResponse:
        require_neutral_worker(caller_scope(context))
        settlements = [_failure(item.owner_id, item.failure) for item in request.items]
        answers = await self._settle(settlements, owner=None)
        return self._outcomes(settlements, answers, "operations_failed")

    async def _settle(
        self, settlements: list[operations.Settlement], owner: str | None
    ) -> list[OperationState | DomainError]:
        """Settle leases in one transaction: a batch of many owners (``owner`` None), or one
        lease of ``owner``'s; answer each alone."""
        now = self._clock()
        return await self._db.run_core_async(
            lambda tx: operations.settle(tx, settlements, now), owner_id=owner, short=True
        )

    async def _settle_one(self, owner: str, settlement: operations.Settlement) -> OperationState:
        (answer,) = await self._settle([settlement], owner)
        if isinstance(answer, DomainError):
            raise answer
        return answer

    def _outcomes(
        self,
        settlements: list[operations.Settlement],
        answers: Sequence[OperationState | DomainError],
        event: str,
    ) -> pb.LeaseMutationsResponse:
        outcomes = []
        for item, answer in zip(settlements, answers, strict=True):
            operation_id = item.operation_id
            if isinstance(answer, DomainError):
                outcomes.append(
                    pb.LeaseMutationsResponse.Outcome(
                        operation_id=operation_id,
                        status_code=status_for(answer).value[0],
                        error_code=answer.code,
                        message=answer.message,
                    )
                )
                continue
            outcomes.append(
                pb.LeaseMutationsResponse.Outcome(
                    operation_id=operation_id, state=convert.state_to_pb(answer)
                )
            )
        refused = sum(1 for outcome in outcomes if outcome.status_code)
        log.info(event, count=len(outcomes), refused=refused)
        return pb.LeaseMutationsResponse(outcomes=outcomes)

    # ---- the worker back in the owner scope, holding the lease ---------------------------

    async def Heartbeat(
        self,
        request_iterator: AsyncIterator[pb.HeartbeatRequest],
        context: ServicerContext,
    ) -> AsyncIterator[pb.HeartbeatResponse]:
        owner = require_worker_owner(caller_scope(context)).owner_id
        beats = BeatReader(request_iterator)
        try:
            first = await beats.next()
            if not isinstance(first, pb.HeartbeatRequest):
                return
            operation_id, token = first.operation_id, first.lease_token
            if not operation_id or not token:
                raise InvalidArgument("lease_token", "the first heartbeat names the lease")
            lease_seconds = first.lease_seconds or DEFAULT_HEARTBEAT_LEASE_SECONDS
            reply = await self._beat(owner, operation_id, token, lease_seconds, first)
            log.info("lease_stream_opened", operation_id=operation_id, owner=owner)
            yield reply
            pushed = reply.cancel_requested  # the holder knows already
            with self.cancels.watching(operation_id) as cancelled:
                while True:
                    beat = await beats.next(unless=None if pushed else cancelled)
                    if beat is None:
                        return
                    if isinstance(beat, Pushed):
                        pushed = True
                        log.info("cancel_pushed", operation_id=operation_id, owner=owner)
                        yield pb.HeartbeatResponse(cancel_requested=True, pushed=True)
                        continue
                    if not _names_only(beat, operation_id, token):
                        raise InvalidArgument("operation_id", "one stream heartbeats one lease")
                    lease_seconds = beat.lease_seconds or lease_seconds
                    reply = await self._beat(owner, operation_id, token, lease_seconds, beat)
                    pushed = pushed or reply.cancel_requested
                    yield reply
        finally:
            beats.close()

    async def _beat(
        self,
        owner: str,
        operation_id: str,
        token: str,
        lease_seconds: int,
        beat: pb.HeartbeatRequest,
    ) -> pb.HeartbeatResponse:
        progress = beat.progress_percent if beat.HasField("progress_percent") else None
        lease = HeldLease(operation_id, owner, token, lease_seconds, progress)
        now = self._clock()
        expires, cancel_requested = await self._db.run_core_async(
            lambda tx: operations.heartbeat(tx, lease, now), owner_id=owner, short=True
        )
        return pb.HeartbeatResponse(
            lease_expires_at=convert.timestamp(expires), cancel_requested=cancel_requested
        )

    # ---- the worker's one lease stream (neutral scope, each lease naming its owner) -------

    async def HoldLeases(
        self,
        request_iterator: AsyncIterator[pb.HoldLeasesRequest],
        context: ServicerContext,
    ) -> AsyncIterator[pb.HoldLeasesResponse]:
        require_neutral_worker(caller_scope(context))
        beats = BeatReader(request_iterator)
        held = HeldLeases()
        try:
            with self.cancels.watching_many() as cancels:
                while True:
                    request = await beats.next(unless=cancels.event)
                    if request is None:
                        return
                    if isinstance(request, Pushed):
                        cancelled = sorted(cancels.take() & {lease.operation_id for lease in held})
                        for operation_id in cancelled:
                            log.info("cancel_pushed", operation_id=operation_id)
                        if cancelled:
                            yield pb.HoldLeasesResponse(
                                outcomes=[
                                    pb.HoldLeasesResponse.Outcome(
                                        operation_id=operation_id, cancel_requested=True
                                    )
                                    for operation_id in cancelled
                                ],
                                pushed=True,
                            )
                        continue
                    for operation_id in request.dropped:
                        cancels.discard(operation_id)
                    yield await self._hold(held, request, cancels)
        finally:
            beats.close()

    async def _hold(
        self, held: HeldLeases, request: pb.HoldLeasesRequest, cancels: Watch
    ) -> pb.HoldLeasesResponse:
        """One beat: every lease the stream holds extended by one transaction, each
        answered alone; a lost or refused one leaves the stream and its cancel watch."""
        beat = held.apply(_entries(request), request.dropped)
        added = {lease.operation_id for lease in request.leases if lease.lease_token}
        outcomes = [_refusal(operation_id, error) for operation_id, error in beat.refused.items()]
        for operation_id in added | beat.refused.keys():  # a new lease is watched afresh
            cancels.discard(operation_id)
        if beat.held:
            now = self._clock()
            answers = await self._db.run_core_async(
                lambda tx: operations.extend(tx, beat.held, now), owner_id=None, short=True
            )
        else:
            answers = []
        for lease, answer in zip(beat.held, answers, strict=True):
            if isinstance(answer, DomainError):
                held.lose(lease.operation_id)
                cancels.discard(lease.operation_id)
                outcomes.append(_refusal(lease.operation_id, answer))
                continue
            expires, cancel_requested = answer
            if cancel_requested:  # the holder learns it here: no push after this answer
                cancels.discard(lease.operation_id)
            elif not cancels.woken(lease.operation_id):
                cancels.add(lease.operation_id)
            if lease.operation_id in added:
                log.info(
                    "lease_stream_opened", operation_id=lease.operation_id, owner=lease.owner_id
                )
            outcomes.append(
                pb.HoldLeasesResponse.Outcome(
                    operation_id=lease.operation_id,
                    lease_expires_at=convert.timestamp(expires),
                    cancel_requested=cancel_requested,
                )
            )
        return pb.HoldLeasesResponse(outcomes=outcomes)

    async def CompleteOperation(
        self, request: pb.CompleteOperationRequest, context: ServicerContext
    ) -> pb.LeaseMutationResponse:
        owner = require_worker_owner(caller_scope(context)).owner_id
        state = await self._settle_one(owner, _completion(owner, request))
        log.info("operation_completed", operation_id=request.operation_id, owner=owner)
        return _state_reply(state)

    async def FailOperation(
        self, request: pb.FailOperationRequest, context: ServicerContext
    ) -> pb.LeaseMutationResponse:
        owner = require_worker_owner(caller_scope(context)).owner_id
        state = await self._settle_one(owner, _failure(owner, request))
        log.info(
            "operation_failed",
            operation_id=request.operation_id,
            owner=owner,
            retryable=request.retryable,
            failure_code=request.failure_code,
            state=state,
        )
        return _state_reply(state)

    async def RequestExternalFallback(
        self, request: pb.RequestExternalFallbackRequest, context: ServicerContext
    ) -> pb.LeaseMutationResponse:
        owner = require_worker_owner(caller_scope(context)).owner_id
        fallback = operations.Settlement(
            owner,
            request.operation_id,
            request.lease_token,
            Event.REQUEST_FALLBACK,
            provenance=_provenance(request.provenance),
        )
        state = await self._settle_one(owner, fallback)
        log.info("operation_fallback", operation_id=request.operation_id, owner=owner, state=state)
        return _state_reply(state)

    async def AcknowledgeCancellation(
        self, request: pb.AcknowledgeCancellationRequest, context: ServicerContext
    ) -> pb.LeaseMutationResponse:
        owner = require_worker_owner(caller_scope(context)).owner_id
        acknowledged = operations.Settlement(
            owner, request.operation_id, request.lease_token, Event.ACKNOWLEDGE_CANCEL
        )
        state = await self._settle_one(owner, acknowledged)
        log.info("operation_cancel_acknowledged", operation_id=request.operation_id, owner=owner)
        return _state_reply(state)
