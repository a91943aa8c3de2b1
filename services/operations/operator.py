"""The Operator gRPC servicer (ADR 19): the operator scope, conversion, one transaction.

Served next to the Operations service, on its watches: an operator's cancel of
a running operation is pushed to the lease holder at once, as the owner's is.
Every call is logged with who made it (the credential's ``sub``) and what.
"""

from __future__ import annotations

from datetime import timedelta

import structlog

from durable_ops.api.operator.v1 import operator_pb2 as opb
from durable_ops.api.operator.v1 import operator_pb2_grpc as opb_grpc
from durable_ops.model import bounds
from durable_ops.model import retention as retention_rules
from durable_ops.model.errors import InvalidArgument
from durable_ops.model.operator import OperatorFilter
from durable_ops.model.retention import RetentionPolicy
from durable_ops.model.scope import require_operator
from durable_ops.model.tasks import TASKS
from durable_ops.operations.app import OperationsApp
from durable_ops.rpc import ServicerContext
from durable_ops.rpc.scope import caller_name, caller_scope
from durable_ops.settings import DEFAULT_TOMBSTONE_RETENTION_DAYS
from durable_ops.storage.task_pauses import Pause
from durable_ops.wire import operations as convert
from durable_ops.wire.operator import operator_operation

log = structlog.get_logger(__name__)
SERVICE_NAME = opb.DESCRIPTOR.services_by_name["OperatorService"].full_name
DEFAULT_TOMBSTONES = timedelta(days=DEFAULT_TOMBSTONE_RETENTION_DAYS)


def _operator(context: ServicerContext) -> str:
    """The operator scope, or PERMISSION_DENIED; answers who is calling, for the log."""
    require_operator(caller_scope(context))
    return caller_name(context) or "unnamed"


def _policy(request: opb.PruneOperationsRequest, tombstones: timedelta) -> RetentionPolicy:
    if not request.HasField("older_than"):
        raise InvalidArgument("older_than", "is required: how long after it finished")
    if request.HasField("tombstones_older_than"):
        tombstones = request.tombstones_older_than.ToTimedelta()
    return RetentionPolicy(request.older_than.ToTimedelta(), tombstones).validated()


def _filters(request: opb.ListOperationsRequest) -> OperatorFilter:
    older_than: timedelta | None = None
    if request.HasField("older_than"):
        older_than = request.older_than.ToTimedelta()
    return OperatorFilter(
        owner_id=request.owner_id,
        state=convert.state_from_pb(request.state),
        task_type=request.task_type,
        older_than=older_than,
    ).validated()


def _status(task_type: str, pause: Pause | None) -> opb.TaskTypeStatus:
    status = opb.TaskTypeStatus(task_type=task_type, paused=pause is not None)
    if pause is not None:
        status.paused_by = pause.paused_by
        status.paused_at.CopyFrom(convert.timestamp(pause.paused_at))
    return status


class OperatorService(opb_grpc.OperatorServiceServicer):
    def __init__(self, app: OperationsApp, *, tombstones: timedelta = DEFAULT_TOMBSTONES) -> None:
        self._app = app
        self._tombstones = tombstones  # a prune's tombstone horizon when its call names none

    async def ListOperations(
        self, request: opb.ListOperationsRequest, context: ServicerContext
    ) -> opb.ListOperationsResponse:
        who = _operator(context)
        filters = _filters(request)
        page = await self._app.inspect(
            size=request.page_size, token=request.page_token, filters=filters
        )
        log.info("operator_list", operator=who, filters=filters.describe(), count=len(page.items))
        return opb.ListOperationsResponse(
            operations=[operator_operation(row) for row in page.items],
            next_page_token=page.next_token or "",
        )

    async def GetOperation(
        self, request: opb.GetOperationRequest, context: ServicerContext
    ) -> opb.OperatorOperation:
        who = _operator(context)
        row, attempts = await self._app.show(request.operation_id)
        log.info("operator_show", operator=who, operation_id=row.id, owner=row.owner_user_id)
        return operator_operation(row, attempts)

    async def CancelOperation(
        self, request: opb.CancelOperationRequest, context: ServicerContext
    ) -> opb.OperatorOperation:
        who = _operator(context)
        row = await self._app.force_cancel(request.operation_id)
        log.info(
            "operator_cancel",
            operator=who,
            operation_id=row.id,
            owner=row.owner_user_id,
            state=row.state,
            cancel_requested=row.cancel_requested,
        )
        return operator_operation(row)

    async def RetryOperation(
        self, request: opb.RetryOperationRequest, context: ServicerContext
    ) -> opb.OperatorOperation:
        who = _operator(context)
        row = await self._app.force_retry(request.operation_id)
        log.info(
            "operator_retry",
            operator=who,
            operation_id=row.id,
            owner=row.owner_user_id,
            state=row.state,
            attempt=row.attempt,
        )
        return operator_operation(row)

    async def PauseTaskType(
        self, request: opb.PauseTaskTypeRequest, context: ServicerContext
    ) -> opb.TaskTypeChange:
        who = _operator(context)
        task_type = bounds.task_type(request.task_type)
        pause, changed = await self._app.pause_task_type(task_type, who)
        log.info("operator_pause_task_type", operator=who, task_type=task_type, changed=changed)
        return opb.TaskTypeChange(status=_status(task_type, pause), changed=changed)

    async def ResumeTaskType(
        self, request: opb.ResumeTaskTypeRequest, context: ServicerContext
    ) -> opb.TaskTypeChange:
        who = _operator(context)
        task_type = bounds.task_type(request.task_type)
        changed = await self._app.resume_task_type(task_type)
        log.info("operator_resume_task_type", operator=who, task_type=task_type, changed=changed)
        return opb.TaskTypeChange(status=_status(task_type, None), changed=changed)

    async def ListTaskTypes(
        self, request: opb.ListTaskTypesRequest, context: ServicerContext
    ) -> opb.ListTaskTypesResponse:
        who = _operator(context)
        pauses = {pause.task_type: pause for pause in await self._app.paused_task_types()}
        names = sorted({*TASKS.names(), *pauses})
        log.info("operator_list_task_types", operator=who, paused=len(pauses))
        return opb.ListTaskTypesResponse(
            task_types=[_status(name, pauses.get(name)) for name in names]
        )

    async def PruneOperations(
        self, request: opb.PruneOperationsRequest, context: ServicerContext
    ) -> opb.PruneOperationsResponse:
        who = _operator(context)
        policy = _policy(request, self._tombstones)
        batch = retention_rules.batch_size(request.batch_size)
        now = self._app.clock()
        result = await self._app.prune(policy, batch, now, dry_run=request.dry_run)
        log.info(
            "operator_prune",
            operator=who,
            older_than=int(policy.operations.total_seconds()),
            tombstones_older_than=int(policy.tombstones.total_seconds()),
            dry_run=request.dry_run,
            pruned=result.pruned,
            forgotten=result.forgotten,
            more=result.more,
        )
        answer = opb.PruneOperationsResponse(
            pruned=result.pruned, forgotten=result.forgotten, more=result.more
        )
        answer.finished_before.FromDatetime(policy.operations_finished_before(now))
        answer.tombstones_finished_before.FromDatetime(policy.tombstones_finished_before(now))
        return answer
