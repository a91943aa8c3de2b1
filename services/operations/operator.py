"""The Operator gRPC servicer (ADR 19): the operator scope, conversion, one transaction.

Served next to the Operations service, on its watches: an operator's cancel of
a running operation is pushed to the lease holder at once, as the owner's is.
Every call is audited with who made it and through what (``operations.acting``);
the console's sign-in calls are in ``operations.console_service``.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import timedelta

from durable_ops.api.operator.v1 import operator_pb2 as opb
from durable_ops.api.operator.v1 import operator_pb2_grpc as opb_grpc
from durable_ops.model import bounds
from durable_ops.model import retention as retention_rules
from durable_ops.model.tasks import TASKS
from durable_ops.operations.acting import Acting, operator_call
from durable_ops.operations.app import OperationsApp
from durable_ops.operations.console import ConsoleSignIns
from durable_ops.operations.console_service import ConsoleSignInCalls
from durable_ops.rpc import ServicerContext
from durable_ops.settings import DEFAULT_TOMBSTONE_RETENTION_DAYS
from durable_ops.wire.operator import (
    operator_filter,
    operator_operation,
    prune_response,
    queue_depth,
    retention_policy,
    task_type_status,
)

SERVICE_NAME = opb.DESCRIPTOR.services_by_name["OperatorService"].full_name
DEFAULT_TOMBSTONES = timedelta(days=DEFAULT_TOMBSTONE_RETENTION_DAYS)


class OperatorService(ConsoleSignInCalls, opb_grpc.OperatorServiceServicer):
    def __init__(self, app: OperationsApp, *, tombstones: timedelta = DEFAULT_TOMBSTONES) -> None:
        self._app = app
        self._tombstones = tombstones  # a prune's tombstone horizon when its call names none
        self.sign_ins = ConsoleSignIns(app.db, app.clock)

    @operator_call
    async def ListOperations(
        self, request: opb.ListOperationsRequest, context: ServicerContext, who: Acting
    ) -> opb.ListOperationsResponse:
        filters = operator_filter(request)
        page = await self._app.inspect(
            size=request.page_size, token=request.page_token, filters=filters
        )
        who.audit("operator_list", filters=filters.describe(), count=len(page.items))
        return opb.ListOperationsResponse(
            operations=[operator_operation(row) for row in page.items],
            next_page_token=page.next_token or "",
        )

    @operator_call
    async def GetOperation(
        self, request: opb.GetOperationRequest, context: ServicerContext, who: Acting
    ) -> opb.OperatorOperation:
        row, attempts = await self._app.show(request.operation_id)
        who.audit_operation("operator_show", row)
        return operator_operation(row, attempts)

    @operator_call
    async def CancelOperation(
        self, request: opb.CancelOperationRequest, context: ServicerContext, who: Acting
    ) -> opb.OperatorOperation:
        row = await self._app.force_cancel(request.operation_id)
        who.audit_operation("operator_cancel", row)
        return operator_operation(row)

    @operator_call
    async def RetryOperation(
        self, request: opb.RetryOperationRequest, context: ServicerContext, who: Acting
    ) -> opb.OperatorOperation:
        row = await self._app.force_retry(request.operation_id)
        who.audit_operation("operator_retry", row)
        return operator_operation(row)

    @operator_call
    async def PauseTaskType(
        self, request: opb.PauseTaskTypeRequest, context: ServicerContext, who: Acting
    ) -> opb.TaskTypeChange:
        task_type = bounds.task_type(request.task_type)
        pause, changed = await self._app.pause_task_type(task_type, who.operator)
        who.audit("operator_pause_task_type", task_type=task_type, changed=changed)
        return opb.TaskTypeChange(status=task_type_status(task_type, pause), changed=changed)

    @operator_call
    async def ResumeTaskType(
        self, request: opb.ResumeTaskTypeRequest, context: ServicerContext, who: Acting
    ) -> opb.TaskTypeChange:
        task_type = bounds.task_type(request.task_type)
        changed = await self._app.resume_task_type(task_type)
        who.audit("operator_resume_task_type", task_type=task_type, changed=changed)
        return opb.TaskTypeChange(status=task_type_status(task_type, None), changed=changed)

    @operator_call
    async def ListTaskTypes(
        self, request: opb.ListTaskTypesRequest, context: ServicerContext, who: Acting
    ) -> opb.ListTaskTypesResponse:
        pauses = {pause.task_type: pause for pause in await self._app.paused_task_types()}
        names = sorted({*TASKS.names(), *pauses})
        who.audit("operator_list_task_types", paused=len(pauses))
        return opb.ListTaskTypesResponse(
            task_types=[task_type_status(name, pauses.get(name)) for name in names]
        )

    @operator_call
    async def PruneOperations(
        self, request: opb.PruneOperationsRequest, context: ServicerContext, who: Acting
    ) -> opb.PruneOperationsResponse:
        policy = retention_policy(request, self._tombstones)
        batch = retention_rules.batch_size(request.batch_size)
        now = self._app.clock()
        result = await self._app.prune(policy, batch, now, dry_run=request.dry_run)
        answer = prune_response(result.pruned, result.forgotten, result.more, policy, now)
        who.audit(
            "operator_prune",
            older_than=int(policy.operations.total_seconds()),
            tombstones_older_than=int(policy.tombstones.total_seconds()),
            dry_run=request.dry_run,
            **asdict(result),
        )
        return answer

    @operator_call
    async def GetQueueDepths(
        self, request: opb.GetQueueDepthsRequest, context: ServicerContext, who: Acting
    ) -> opb.GetQueueDepthsResponse:
        depths = await self._app.queue_depths()
        who.audit("operator_queues", task_types=len(depths))
        answer = opb.GetQueueDepthsResponse(queues=[queue_depth(depth) for depth in depths])
        answer.read_at.FromDatetime(self._app.clock())
        return answer
