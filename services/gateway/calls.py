"""The one way a route calls a backend: as the authenticated user, errors translated once.

``owner_calls(request)`` authenticates the caller (401/403 problems) and
returns an ``OwnerCalls``; ``await calls(stub.Method, message)`` sends the
gateway credential plus ``x-owner-id`` with a deadline and turns a failed
call into the typed ``DomainError`` that the problem handlers map to HTTP.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
import structlog
from starlette.requests import Request

from durable_ops.gateway.auth import User, require_user
from durable_ops.gateway.backends import Backends
from durable_ops.gateway.context import backends_of
from durable_ops.model.errors import DomainError, Unavailable
from durable_ops.rpc.errors import domain_error_from_rpc

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

    def stub(self, backend: str, factory: Callable[[grpc.aio.Channel], Any]) -> Any:
        return self.backends.stub(backend, factory)

    async def __call__(self, method: Callable[..., Awaitable[Any]], message: Any) -> Any:
        """Send ``message`` to the stub ``method`` in the caller's owner scope."""
        try:
            return await method(
                message,
                metadata=self.backends.metadata(self.user.id),
                timeout=self.backends.call_timeout,
            )
        except grpc.aio.AioRpcError as exc:
            raise translate(exc) from exc


def owner_calls(request: Request) -> OwnerCalls:
    """Authenticate the request and bind backend calls to its user."""
    return OwnerCalls(backends_of(request), require_user(request))
