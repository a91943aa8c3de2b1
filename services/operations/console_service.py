"""The Operator service's console sign-in calls (ADR 0045), beside the operator's actions.

The gateway opens, reads and ends console sessions with the link secret or
session it was handed, in no owner's scope and before any operator is known;
making a link and ending an operator's sessions are the operator's own
(``operator_call``: audited, the operator's key only, not a console session).
"""

from __future__ import annotations

from durable_ops.api.operator.v1 import operator_pb2 as opb
from durable_ops.model import console
from durable_ops.model.errors import InvalidArgument
from durable_ops.model.operator import operator_name
from durable_ops.operations.acting import Acting, operator_call
from durable_ops.operations.console import ConsoleSignIns
from durable_ops.rpc import ServicerContext
from durable_ops.rpc.scope import console_session_of, require_gateway_without_owner
from durable_ops.wire.operator import console_session


def _signed_in(context: ServicerContext) -> str:
    """The console session a gateway call names; UNAUTHENTICATED without one."""
    session_id = console_session_of(context)
    if session_id is None:
        require_gateway_without_owner(context)
        raise console.session_ended()
    return session_id


class ConsoleSignInCalls:
    """Part of ``OperatorService``: its console sign-in methods."""

    sign_ins: ConsoleSignIns

    @operator_call
    async def CreateConsoleLink(
        self, request: opb.CreateConsoleLinkRequest, context: ServicerContext, who: Acting
    ) -> opb.CreateConsoleLinkResponse:
        """The operator's own key only: a console session cannot make another."""
        link = await self.sign_ins.link(operator_name(who.operator))
        who.audit("operator_console_link")
        answer = opb.CreateConsoleLinkResponse(link_secret=link.secret, operator=link.operator)
        answer.expires_at.FromDatetime(link.expires_at)
        return answer

    async def OpenConsoleSession(
        self, request: opb.OpenConsoleSessionRequest, context: ServicerContext
    ) -> opb.ConsoleSession:
        require_gateway_without_owner(context)
        signed = await self.sign_ins.open(request.link_secret)
        return console_session(signed, signed.secret)

    async def GetConsoleSession(
        self, request: opb.GetConsoleSessionRequest, context: ServicerContext
    ) -> opb.ConsoleSession:
        return console_session(await self.sign_ins.resolve(_signed_in(context)))

    async def EndConsoleSession(
        self, request: opb.EndConsoleSessionRequest, context: ServicerContext
    ) -> opb.EndConsoleSessionResponse:
        await self.sign_ins.end(_signed_in(context))
        return opb.EndConsoleSessionResponse()

    @operator_call
    async def EndOperatorSessions(
        self, request: opb.EndOperatorSessionsRequest, context: ServicerContext, who: Acting
    ) -> opb.EndOperatorSessionsResponse:
        """The operator's own key: end an operator's (or everyone's) console sign-ins."""
        if request.everyone and request.operator:
            raise InvalidArgument("operator", "must be empty when everyone is set")
        whose = None if request.everyone else operator_name(request.operator or who.operator)
        ended = await self.sign_ins.end_operator(whose)
        who.audit("operator_console_revoke", whose=whose or "*", ended=ended)
        return opb.EndOperatorSessionsResponse(ended=ended)
