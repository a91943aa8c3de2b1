"""The one way a route calls a backend: as the authenticated user, errors translated once.

``owner_calls(request)`` authenticates the caller (401/403 problems) and
returns an ``OwnerCalls``; ``await calls(stub.Method, message)`` sends the
gateway credential plus ``x-owner-id`` with a deadline and turns a failed
call into the typed ``DomainError`` that the problem handlers map to HTTP.
The message must be the method's request type and the answer is its response
type, both as the generated stubs declare them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import grpc
import structlog
from google.protobuf.message import Message
from starlette.requests import Request

from durable_ops.gateway.auth import User, require_user
from durable_ops.gateway.backends import Backends
from durable_ops.gateway.context import backends_of
from durable_ops.model.errors import DomainError, Unavailable
from durable_ops.rpc.client import UnaryMethod
from durable_ops.rpc.errors import domain_error_from_rpc

StubT = TypeVar("StubT")
RequestT = TypeVar("RequestT", bound=Message)
ResponseT = TypeVar("ResponseT", bound=Message)

_log = structlog.get_logger(__name__)
# The backend refused the gateway's own credential: a deployment fault, not the user's.
_GATEWAY_CREDENTIAL_CODES = frozenset({"invalid_service_credential", "service_credential_required"})


def translate(exc: grpc.aio.AioRpcError) -> DomainError:
    """The domain error of a failed call; failures that are not the caller's are a 503."""
    error = domain_error_from_rpc(exc)
    if error.kind == "internal" or error.code in _GATEWAY_CREDENTIAL_CODES:
        _log.error("backend_call_failed", status=exc.code().name, code=error.code)
        return Unavailable("backend unavailable", code="backend_unavailable")
    return error


@dataclass(frozen=True)
class OwnerCalls:
    backends: Backends
    user: User

    def stub(self, backend: str, factory: Callable[[grpc.aio.Channel], StubT]) -> StubT:
        return self.backends.stub(backend, factory)

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
        try:
            return await method(
                message,
                metadata=self.backends.metadata(self.user.id),
                timeout=self.backends.call_timeout + waits,
            )
        except grpc.aio.AioRpcError as exc:
            raise translate(exc) from exc


def owner_calls(request: Request) -> OwnerCalls:
    """Authenticate the request and bind backend calls to its user."""
    return OwnerCalls(backends_of(request), require_user(request))


def stub_for(
    backend: str, factory: Callable[[grpc.aio.Channel], StubT]
) -> Callable[[OwnerCalls], StubT]:
    """A route module's stub getter: ``_stub = stub_for("operations", OperationsServiceStub)``.

    ``_stub(calls)`` is that backend's stub, typed as ``factory`` builds it on an
    aio channel (``Backends.stub``), without the module having to name that type.
    """
    return lambda calls: calls.stub(backend, factory)
