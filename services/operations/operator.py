"""The Operator gRPC servicer (ADR 19): the operator scope, conversion, one transaction.

Served next to the Operations service, on its watches: an operator's cancel of
a running operation is pushed to the lease holder at once, as the owner's is.
Every call is logged with who made it (the credential's ``sub``, or the console
session's operator) and what, and ``via``: ``opsctl`` for the operator's own
key, ``console`` for the gateway acting with a console session (ADR 0045); a
call the service refuses, with its stable code (``operator_call``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

import structlog

from durable_ops.api.operator.v1 import operator_pb2 as opb
from durable_ops.api.operator.v1 import operator_pb2_grpc as opb_grpc
from durable_ops.model import bounds, console
from durable_ops.model import retention as retention_rules
from durable_ops.model.errors import DomainError, InvalidArgument, Unauthenticated
from durable_ops.model.operator import operator_name
from durable_ops.model.scope import require_operator
from durable_ops.model.tasks import TASKS
from durable_ops.operations.app import OperationsApp
from durable_ops.operations.console import ConsoleSignIns
from durable_ops.rpc import ServicerContext
from durable_ops.rpc.scope import (
    caller_name,
    caller_scope,
    console_session_of,
    require_gateway_without_owner,
)
from durable_ops.settings import DEFAULT_TOMBSTONE_RETENTION_DAYS
from durable_ops.wire.operator import (
    console_session,
    operator_filter,
    operator_operation,
    queue_depth,
    retention_policy,
    task_type_status,
)

log = structlog.get_logger(__name__)
SERVICE_NAME = opb.DESCRIPTOR.services_by_name["OperatorService"].full_name
DEFAULT_TOMBSTONES = timedelta(days=DEFAULT_TOMBSTONE_RETENTION_DAYS)


@dataclass(frozen=True)
class Acting:
    """Who makes an operator call, as the audit log names them, and through what."""

    operator: str
    via: str  # "opsctl": the operator's own key; "console": the gateway with a session

    def audit(self, event: str, **fields: object) -> None:
        log.info(event, operator=self.operator, via=self.via, **fields)


Request = TypeVar("Request")
Reply = TypeVar("Reply")


def operator_call(
    handler: Callable[[OperatorService, Request, ServicerContext, Acting], Awaitable[Reply]],
) -> Callable[[OperatorService, Request, ServicerContext], Awaitable[Reply]]:
    """An operator's method: who acts is found first (``_acting``); a call refused after that
    is logged once, ``operator_refused`` with who, via, the method and the stable code."""
    method = handler.__name__

    async def call(self: OperatorService, request: Request, context: ServicerContext) -> Reply:
        who = await self._acting(context, method)
        try:
            return await handler(self, request, context, who)
        except DomainError as refused:
            who.audit("operator_refused", call=method, code=refused.code)
            raise

    return call


def _signed_in(context: ServicerContext) -> str:
    """The console session a gateway call names; UNAUTHENTICATED without one."""
    session_id = console_session_of(context)
    if session_id is None:
        require_gateway_without_owner(context)
        raise console.session_ended()
    return session_id


class OperatorService(opb_grpc.OperatorServiceServicer):
    def __init__(self, app: OperationsApp, *, tombstones: timedelta = DEFAULT_TOMBSTONES) -> None:
        self._app = app
        self._tombstones = tombstones  # a prune's tombstone horizon when its call names none
        self._console = ConsoleSignIns(app.db, app.clock)

    async def _acting(self, context: ServicerContext, method: str) -> Acting:
        """The operator behind this call: the operator's own key, or the gateway with a
        live console session, for the calls a console may make (``model.console``)."""
        session_id = console_session_of(context)
        if session_id is None:  # the operator's own key (the operator scope), or refused
            require_operator(caller_scope(context))
            return Acting(caller_name(context) or "unnamed", "opsctl")
        console.require_console_call(method)
        signed = await self._console.resolve(session_id)
        return Acting(signed.operator, "console")

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
        who.audit("operator_show", operation_id=row.id, owner=row.owner_user_id)
        return operator_operation(row, attempts)

    @operator_call
    async def CancelOperation(
        self, request: opb.CancelOperationRequest, context: ServicerContext, who: Acting
    ) -> opb.OperatorOperation:
        row = await self._app.force_cancel(request.operation_id)
        who.audit(
            "operator_cancel",
            operation_id=row.id,
            owner=row.owner_user_id,
            state=row.state,
            cancel_requested=row.cancel_requested,
        )
        return operator_operation(row)

    @operator_call
    async def RetryOperation(
        self, request: opb.RetryOperationRequest, context: ServicerContext, who: Acting
    ) -> opb.OperatorOperation:
        row = await self._app.force_retry(request.operation_id)
        who.audit(
            "operator_retry",
            operation_id=row.id,
            owner=row.owner_user_id,
            state=row.state,
            attempt=row.attempt,
        )
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
        who.audit(
            "operator_prune",
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

    @operator_call
    async def GetQueueDepths(
        self, request: opb.GetQueueDepthsRequest, context: ServicerContext, who: Acting
    ) -> opb.GetQueueDepthsResponse:
        depths = await self._app.queue_depths()
        who.audit("operator_queues", task_types=len(depths))
        answer = opb.GetQueueDepthsResponse(queues=[queue_depth(depth) for depth in depths])
        answer.read_at.FromDatetime(self._app.clock())
        return answer

    # ---- the console's sign-in (ADR 0045) ------------------------------------------------

    @operator_call
    async def CreateConsoleLink(
        self, request: opb.CreateConsoleLinkRequest, context: ServicerContext, who: Acting
    ) -> opb.CreateConsoleLinkResponse:
        """The operator's own key only: a console session cannot make another."""
        link = await self._console.link(operator_name(who.operator))
        who.audit("operator_console_link")
        answer = opb.CreateConsoleLinkResponse(link_secret=link.secret, operator=link.operator)
        answer.expires_at.FromDatetime(link.expires_at)
        return answer

    async def OpenConsoleSession(
        self, request: opb.OpenConsoleSessionRequest, context: ServicerContext
    ) -> opb.ConsoleSession:
        require_gateway_without_owner(context)
        try:
            signed = await self._console.open(request.link_secret)
        except Unauthenticated:
            log.info("operator_console_link_refused", via="console")
            raise
        log.info("operator_console_sign_in", operator=signed.operator, via="console")
        return console_session(signed, signed.secret)

    async def GetConsoleSession(
        self, request: opb.GetConsoleSessionRequest, context: ServicerContext
    ) -> opb.ConsoleSession:
        return console_session(await self._console.resolve(_signed_in(context)))

    async def EndConsoleSession(
        self, request: opb.EndConsoleSessionRequest, context: ServicerContext
    ) -> opb.EndConsoleSessionResponse:
        session_id = _signed_in(context)
        try:
            signed = await self._console.resolve(session_id)
        except Unauthenticated:
            return opb.EndConsoleSessionResponse()  # already ended: the outcome is the same
        await self._console.end(session_id)
        log.info("operator_console_sign_out", operator=signed.operator, via="console")
        return opb.EndConsoleSessionResponse()

    @operator_call
    async def EndOperatorSessions(
        self, request: opb.EndOperatorSessionsRequest, context: ServicerContext, who: Acting
    ) -> opb.EndOperatorSessionsResponse:
        """The operator's own key: end an operator's (or everyone's) console sign-ins."""
        if request.everyone and request.operator:
            raise InvalidArgument("operator", "must be empty when everyone is set")
        whose = None if request.everyone else operator_name(request.operator or who.operator)
        ended = await self._console.end_operator(whose)
        who.audit("operator_console_revoke", whose=whose or "*", ended=ended)
        return opb.EndOperatorSessionsResponse(ended=ended)
