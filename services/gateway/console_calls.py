"""The operator console's calls to the operator service, as the signed-in operator (ADR 0045).

The gateway holds only its own key. It reaches the operator service's console
calls by naming, beside that key's credential, the console session the
browser's ``ops_console`` cookie carries (``x-operator-session``); the
Operations service checks the session on every call and logs each action under
its operator's name. So the gateway's key alone reaches nothing there, and a
console session reaches only what ``model.console.CONSOLE_CALLS`` lists. An
ended session is ``ConsoleEnded`` (the page asks to sign in again); a refused
gateway credential stays a 503, as for every backend call.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import grpc
from google.protobuf.message import Message

from durable_ops.api.operator.v1 import operator_pb2 as opb
from durable_ops.api.operator.v1 import operator_pb2_grpc as opb_grpc
from durable_ops.gateway.backends import Backends, translate
from durable_ops.model import console
from durable_ops.rpc.scope import OPERATOR_SESSION

BACKEND = "operations"  # the operator service is served by the Operations process
RequestT = TypeVar("RequestT", bound=Message)
ResponseT = TypeVar("ResponseT", bound=Message)


class ConsoleEnded(Exception):
    """The console cookie names no live session; the reason stays here."""


@dataclass(frozen=True)
class ConsoleCalls:
    """Operator calls made for one console session."""

    backends: Backends
    session_id: str

    @property
    def stub(self) -> opb_grpc.OperatorServiceAsyncStub:
        return self.backends.stub(BACKEND, opb_grpc.OperatorServiceStub)

    async def __call__(
        self, method: Callable[..., Awaitable[ResponseT]], message: RequestT
    ) -> ResponseT:
        metadata = (*self.backends.caller.metadata(), (OPERATOR_SESSION, self.session_id))
        try:
            return await method(message, metadata=metadata, timeout=self.backends.call_timeout)
        except grpc.aio.AioRpcError as exc:
            error = translate(exc)
            if error.code == console.SESSION_ENDED:
                raise ConsoleEnded(error.code) from exc
            raise error from exc


async def open_session(backends: Backends, link_secret: str) -> opb.ConsoleSession:
    """Spend a sign-in link on a console session (its id is the cookie's value)."""
    stub = backends.stub(BACKEND, opb_grpc.OperatorServiceStub)
    try:
        reply: opb.ConsoleSession = await stub.OpenConsoleSession(
            opb.OpenConsoleSessionRequest(link_secret=link_secret),
            metadata=backends.caller.metadata(),
            timeout=backends.call_timeout,
        )
    except grpc.aio.AioRpcError as exc:
        raise translate(exc) from exc
    return reply


async def who(calls: ConsoleCalls) -> opb.ConsoleSession:
    """The session's operator and expiry; ``ConsoleEnded`` when it has ended."""
    return await calls(calls.stub.GetConsoleSession, opb.GetConsoleSessionRequest())


async def end(calls: ConsoleCalls) -> None:
    """Sign out: the session ends at once (already ended is fine)."""
    try:
        await calls(calls.stub.EndConsoleSession, opb.EndConsoleSessionRequest())
    except ConsoleEnded:
        return
