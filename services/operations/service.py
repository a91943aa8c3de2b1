"""The Operations gRPC servicer: the caller's scope, message conversion, one use case.

Each method checks the scope it runs in, converts the request
(``wire.operations``), runs one use case of the application layer
(``OperationsApp``, which owns the transactions and logs what changed) and
converts the answer. Errors are translated once, by the server's interceptor
(``rpc.errors``).
Every call that stays open (a claim that may wait, a wait, a watch, a lease
stream) holds a slot of its caller's key while it does (``rpc.open_calls``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.api.operations.v1 import operations_pb2_grpc as pb_grpc
from durable_ops.model import bounds, event_ids
from durable_ops.model.scope import (
    OwnerScope,
    require_admission_for_analyses,
    require_neutral_worker,
    require_operation_changer,
    require_owner,
    require_user_agent,
    require_user_for_analyses,
    require_worker_owner,
)
from durable_ops.operations import lease_streams
from durable_ops.operations.app import OperationsApp
from durable_ops.rpc import ServicerContext
from durable_ops.rpc.open_calls import OpenCalls
from durable_ops.rpc.scope import caller_scope
from durable_ops.storage.operations import CLAIM_BATCH_MAX, Settlement
from durable_ops.telemetry import current_traceparent
from durable_ops.wire import operations as convert

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["OperationsService"].full_name


def owner_of(context: ServicerContext) -> str:
    return require_owner(caller_scope(context)).owner_id


def changer_of(context: ServicerContext) -> OwnerScope:
    """The owner whose operations the gateway (for the user) or a producer changes."""
    return require_operation_changer(caller_scope(context))


def _reader(context: ServicerContext) -> str:
    """The owner whose answers so far the gateway reads for them: they quote the owner's
    jobs and CVs, which no other role reads."""
    return require_user_agent(caller_scope(context)).owner_id


def _holder(context: ServicerContext) -> str:
    """The owner a worker acts for, holding one of the owner's leases."""
    return require_worker_owner(caller_scope(context)).owner_id


class OperationsService(pb_grpc.OperationsServiceServicer):
    def __init__(self, app: OperationsApp, open_calls: OpenCalls) -> None:
        self.app = app
        self.open_calls = open_calls  # shared with the server's google.longrunning face

    # ---- the owner's -------------------------------------------------------------------

    async def CreateOperation(
        self, request: pb.CreateOperationRequest, context: ServicerContext
    ) -> pb.CreateOperationResponse:
        changer = changer_of(context)
        require_admission_for_analyses(changer, request.task_type)
        create = convert.create_request(request, current_traceparent())
        row, created = await self.app.create(changer.owner_id, create)
        return pb.CreateOperationResponse(operation=convert.operation(row), created=created)

    async def GetOperation(
        self, request: pb.GetOperationRequest, context: ServicerContext
    ) -> pb.Operation:
        return convert.operation(await self.app.get(owner_of(context), request.operation_id))

    async def WaitOperation(
        self, request: pb.WaitOperationRequest, context: ServicerContext
    ) -> pb.Operation:
        owner = owner_of(context)
        seen, seconds = convert.seen(request), convert.wait_seconds(request)
        with self.open_calls.holding():
            # A change of state answers too (SPEC §5, the HTTP long-poll's contract).
            row = await self.app.wait(
                owner, request.operation_id, seconds, seen, state_changes=True
            )
        return convert.operation(row)

    async def ListOperations(
        self, request: pb.ListOperationsRequest, context: ServicerContext
    ) -> pb.ListOperationsResponse:
        page = await self.app.list_page(
            owner_of(context),
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
        changer = changer_of(context)
        row = await self.app.cancel(
            changer.owner_id, request.operation_id, partial(require_user_for_analyses, changer)
        )
        return convert.operation(row)

    async def RetryOperation(
        self, request: pb.RetryOperationRequest, context: ServicerContext
    ) -> pb.Operation:
        changer = changer_of(context)
        row = await self.app.retry(
            changer.owner_id, request.operation_id, partial(require_admission_for_analyses, changer)
        )
        return convert.operation(row)

    async def GetAnswerDraft(
        self, request: pb.GetAnswerDraftRequest, context: ServicerContext
    ) -> pb.AnswerDraft:
        return convert.draft(await self.app.draft(_reader(context), request.operation_id))

    async def WatchOwner(
        self, request: pb.WatchOwnerRequest, context: ServicerContext
    ) -> AsyncIterator[pb.OwnerChange]:
        owner = _reader(context)
        after = event_ids.event_time(request.after) if request.after else None
        n = 0
        with self.open_calls.holding():
            async for batch in self.app.owner_changes(owner, after):
                for row, draft in batch:
                    yield pb.OwnerChange(
                        event_id=event_ids.event_id(row.updated_at, n),
                        operation=convert.operation(row),
                        draft=convert.draft(draft) if draft is not None else None,
                    )
                    n += 1

    # ---- the worker's, in the neutral scope ------------------------------------------------

    async def ClaimOperation(
        self, request: pb.ClaimOperationRequest, context: ServicerContext
    ) -> pb.ClaimOperationResponse:
        require_neutral_worker(caller_scope(context))
        routes = convert.routes(request.routes or [request.route])
        wait = convert.claim_wait_seconds(request)
        with self.open_calls.holding():
            found = await self.app.claim(request.task_types, request.lease_seconds, routes, wait, 1)
        return pb.ClaimOperationResponse(claimed=convert.claimed(*found[0]) if found else None)

    async def ClaimOperations(
        self, request: pb.ClaimOperationsRequest, context: ServicerContext
    ) -> pb.ClaimOperationsResponse:
        require_neutral_worker(caller_scope(context))
        limit = bounds.int_range("max_operations", request.max_operations, (1, CLAIM_BATCH_MAX))
        routes = convert.routes(request.routes or [pb.ROUTE_LOCAL])
        wait = convert.claim_wait_seconds(request)
        with self.open_calls.holding():
            found = await self.app.claim(
                request.task_types, request.lease_seconds, routes, wait, limit
            )
        return pb.ClaimOperationsResponse(claimed=[convert.claimed(*each) for each in found])

    async def SettleOperations(
        self, request: pb.SettleOperationsRequest, context: ServicerContext
    ) -> pb.LeaseMutationsResponse:
        require_neutral_worker(caller_scope(context))
        items = [convert.settlement(item) for item in request.items]
        return convert.outcomes(items, await self.app.settle(items))

    async def HoldLeases(
        self, request_iterator: AsyncIterator[pb.HoldLeasesRequest], context: ServicerContext
    ) -> AsyncIterator[pb.HoldLeasesResponse]:
        require_neutral_worker(caller_scope(context))
        with self.open_calls.holding():
            async for answer in lease_streams.hold_leases(self.app, request_iterator):
                yield answer

    # ---- the worker's, in the owner's scope, holding one lease ----------------------------

    async def Heartbeat(
        self, request_iterator: AsyncIterator[pb.HeartbeatRequest], context: ServicerContext
    ) -> AsyncIterator[pb.HeartbeatResponse]:
        owner = _holder(context)
        with self.open_calls.holding():
            async for answer in lease_streams.heartbeat(self.app, owner, request_iterator):
                yield answer

    async def CompleteOperation(
        self, request: pb.CompleteOperationRequest, context: ServicerContext
    ) -> pb.LeaseMutationResponse:
        return await self._settle_one(convert.completion(_holder(context), request))

    async def FailOperation(
        self, request: pb.FailOperationRequest, context: ServicerContext
    ) -> pb.LeaseMutationResponse:
        return await self._settle_one(convert.failure(_holder(context), request))

    async def RequestExternalFallback(
        self, request: pb.RequestExternalFallbackRequest, context: ServicerContext
    ) -> pb.LeaseMutationResponse:
        return await self._settle_one(convert.fallback(_holder(context), request))

    async def AcknowledgeCancellation(
        self, request: pb.AcknowledgeCancellationRequest, context: ServicerContext
    ) -> pb.LeaseMutationResponse:
        return await self._settle_one(convert.acknowledgement(_holder(context), request))

    async def _settle_one(self, settlement: Settlement) -> pb.LeaseMutationResponse:
        """A single-lease RPC: a batch of one through the same writer."""
        state = await self.app.settle_one(settlement)
        return pb.LeaseMutationResponse(state=convert.state_to_pb(state))
