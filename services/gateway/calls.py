"""The one way a route calls a backend: as the authenticated user, errors translated once.

``await owner_calls(request)`` authenticates the caller (401/403 problems) and
returns an ``OwnerCalls``; ``await calls(stub.Method, message)`` sends the
gateway credential plus ``x-owner-id`` with a deadline and turns a failed
call into the typed ``DomainError`` that the problem handlers map to HTTP.
The message must be the method's request type and the answer is its response
type, both as the generated stubs declare them.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import grpc
from google.protobuf.message import Message
from starlette.requests import Request

from durable_ops.gateway import standing
from durable_ops.gateway.auth import User, require_user
from durable_ops.gateway.backends import Backends, translate
from durable_ops.gateway.context import backends_of
from durable_ops.gateway.outages import watched
from durable_ops.rpc.client import UnaryMethod

StubT = TypeVar("StubT")
RequestT = TypeVar("RequestT", bound=Message)
ResponseT = TypeVar("ResponseT", bound=Message)

# The backend of each method of the stubs ``OwnerCalls.stub`` handed out, so a call's
# outage is logged under its backend's name (``outages``); a stub is named once.
_BACKEND_OF: weakref.WeakKeyDictionary[object, str] = weakref.WeakKeyDictionary()
_NAMED: weakref.WeakSet[object] = weakref.WeakSet()


@dataclass(frozen=True)
class OwnerCalls:
    backends: Backends
    user: User

    def stub(
        self, backend: str, factory: Callable[[grpc.aio.Channel], StubT], target: str | None = None
    ) -> StubT:
        stub = self.backends.stub(backend, factory, target)
        if stub not in _NAMED:
            for method in vars(stub).values():
                with contextlib.suppress(TypeError):  # not a method: nothing weakly held
                    _BACKEND_OF[method] = backend
            _NAMED.add(stub)
        return stub

    async def __call__(
        self,
        method: UnaryMethod[RequestT, ResponseT],
        message: RequestT,
        *,
        waits: float = 0.0,
    ) -> ResponseT:
        """Send ``message`` to the stub ``method`` in the caller's owner scope.

        ``waits``: seconds the call may rightly wait server-side (a long-poll), on
        top of the usual call timeout.
        """
        reply = standing.beside(
            method(
                message,
                metadata=self.backends.metadata(self.user.id),
                timeout=self.backends.call_timeout + waits,
            )
        )
        try:
            await self.stands()
            with watched(self.backends, _BACKEND_OF.get(method)):
                return await reply
        except grpc.aio.AioRpcError as exc:
            raise translate(exc) from exc
        finally:
            reply.cancel()  # a refused caller's call is dropped; once answered, a no-op

    async def stands(self) -> None:
        """Return once the caller's credential is known to stand; raise the refusal if not."""
        if self.user.check is not None:
            await standing.passed(self.user.check)


async def owner_calls(request: Request) -> OwnerCalls:
    """Authenticate the request and bind backend calls to its user.

    A bearer token's revocation check runs beside the calls of a safe method
    (``gateway.standing``): each call's reply waits for it.
    """
    return OwnerCalls(backends_of(request), await require_user(request, defer_check=True))


def stub_for(
    backend: str, factory: Callable[[grpc.aio.Channel], StubT]
) -> Callable[[OwnerCalls], StubT]:
    """A route module's stub getter: ``_stub = stub_for("operations", OperationsServiceStub)``.

    ``_stub(calls)`` is that backend's stub, typed as ``factory`` builds it on an
    aio channel (``Backends.stub``), without the module having to name that type.
    """
    return lambda calls: calls.stub(backend, factory)
