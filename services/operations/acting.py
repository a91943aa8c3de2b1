"""Who makes an operator call (ADR 19, ADR 0045), and the audit line it writes.

An operator acts with their own key (the operator scope; ``via="opsctl"``) or
through the gateway with a live console session (``via="console"``), for the
calls a console may make (``model.console``). Every call is logged with who
made it, ``via`` and what; a call refused once that is known is logged once,
``operator_refused`` with the method and its stable code.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

import structlog

from durable_ops.model import console
from durable_ops.model.errors import DomainError
from durable_ops.model.scope import require_operator
from durable_ops.operations.console import ConsoleSignIns
from durable_ops.rpc import ServicerContext
from durable_ops.rpc.scope import caller_name, caller_scope, console_session_of
from durable_ops.storage.schema import UserOperation

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Acting:
    """Who makes an operator call, as the audit log names them, and through what."""

    operator: str
    via: str  # "opsctl": the operator's own key; "console": the gateway with a session

    def audit(self, event: str, **fields: object) -> None:
        log.info(event, operator=self.operator, via=self.via, **fields)

    def audit_operation(self, event: str, row: UserOperation) -> None:
        """A call on one operation: which, whose, and the state it left it in."""
        self.audit(
            event,
            operation_id=row.id,
            owner=row.owner_user_id,
            state=row.state,
            attempt=row.attempt,
            cancel_requested=row.cancel_requested,
        )


async def acting(context: ServicerContext, method: str, sign_ins: ConsoleSignIns) -> Acting:
    """The operator behind this call: the operator's own key, or the gateway with a live
    console session, for the calls a console may make."""
    session_id = console_session_of(context)
    if session_id is None:  # the operator's own key (the operator scope), or refused
        require_operator(caller_scope(context))
        return Acting(caller_name(context) or "unnamed", "opsctl")
    console.require_console_call(method)
    signed = await sign_ins.resolve(session_id)
    return Acting(signed.operator, "console")


class ServesOperators(Protocol):
    sign_ins: ConsoleSignIns


Servicer = TypeVar("Servicer", bound=ServesOperators)
Request = TypeVar("Request")
Reply = TypeVar("Reply")


def operator_call(
    handler: Callable[[Servicer, Request, ServicerContext, Acting], Awaitable[Reply]],
) -> Callable[[Servicer, Request, ServicerContext], Awaitable[Reply]]:
    """An operator's method: who acts is found first; a refusal after that is audited."""
    method = handler.__name__

    async def call(self: Servicer, request: Request, context: ServicerContext) -> Reply:
        who = await acting(context, method, self.sign_ins)
        try:
            return await handler(self, request, context, who)
        except DomainError as refused:
            who.audit("operator_refused", call=method, code=refused.code)
            raise

    return call
