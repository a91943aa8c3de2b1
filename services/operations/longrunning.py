"""``google.longrunning.Operations`` on the Operations server, for standard clients.

The same owner scope, credentials and use cases as ``OperationsService``
(``OperationsApp``); only the shapes are Google's (``wire.longrunning``).
``WaitOperation`` waits on the replica's watch (``operations.watch``): no waiter
polls alone, and each holds a slot of its caller's key (``rpc.open_calls``), counted
with those of ``OperationsService``.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import grpc
from google.longrunning import operations_pb2_grpc as lro_grpc
from google.longrunning import operations_proto_pb2 as lro
from google.protobuf.empty_pb2 import Empty

from durable_ops.model.errors import InvalidArgument
from durable_ops.model.operation_filter import parse_filter
from durable_ops.model.scope import require_user_for_analyses
from durable_ops.operations.app import OperationsApp
from durable_ops.operations.service import changer_of, owner_of
from durable_ops.rpc import ServicerContext
from durable_ops.rpc.open_calls import OpenCalls
from durable_ops.wire import longrunning as convert
from durable_ops.wire.operations import wait_seconds

SERVICE_NAME = lro.DESCRIPTOR.services_by_name["Operations"].full_name


class LongRunningOperations(lro_grpc.OperationsServicer):
    def __init__(self, app: OperationsApp, open_calls: OpenCalls) -> None:
        self._app = app
        self._open_calls = open_calls

    async def GetOperation(
        self, request: lro.GetOperationRequest, context: ServicerContext
    ) -> lro.Operation:
        row = await self._app.get(owner_of(context), convert.id_from_name(request.name))
        return convert.operation(row)

    async def ListOperations(
        self, request: lro.ListOperationsRequest, context: ServicerContext
    ) -> lro.ListOperationsResponse:
        owner = owner_of(context)
        if request.name not in ("", convert.COLLECTION):
            raise InvalidArgument("name", f'must be "{convert.COLLECTION}"')
        wanted = parse_filter(request.filter)
        page = await self._app.list_page(
            owner,
            size=request.page_size,
            token=request.page_token,
            state=wanted.state,
            task_type=wanted.task_type,
        )
        return lro.ListOperationsResponse(
            operations=[convert.operation(row) for row in page.items],
            next_page_token=page.next_token or "",
        )

    async def CancelOperation(
        self, request: lro.CancelOperationRequest, context: ServicerContext
    ) -> Empty:
        changer = changer_of(context)
        await self._app.cancel(
            changer.owner_id,
            convert.id_from_name(request.name),
            partial(require_user_for_analyses, changer),
        )
        return Empty()

    async def DeleteOperation(
        self, request: lro.DeleteOperationRequest, context: ServicerContext
    ) -> Empty:
        changer = changer_of(context)
        await self._app.delete(
            changer.owner_id,
            convert.id_from_name(request.name),
            partial(require_user_for_analyses, changer),
        )
        return Empty()

    async def WaitOperation(
        self, request: lro.WaitOperationRequest, context: ServicerContext
    ) -> lro.Operation:
        owner = owner_of(context)
        operation_id = convert.id_from_name(request.name)
        with self._open_calls.holding():
            row = await self._app.wait(owner, operation_id, wait_seconds(request))
        return convert.operation(row)


# Typed here: googleapis-common-protos generates its gRPC registration without annotations.
add_to_server: Callable[[LongRunningOperations, grpc.aio.Server], None] = (
    lro_grpc.add_OperationsServicer_to_server
)
