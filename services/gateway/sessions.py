"""Server-side sessions, kept by the Workspace service (issue 35, point 5).

A sign-in creates one (``create``) and the cookie carries only its opaque id;
every authenticated request resolves its credential (``resolve_cookie`` or
``check_token``): one RPC and, behind it, one primary-key read, answering the
cookie's owner or whether a bearer token was revoked. Logout ends the session
(``end``). The gateway holds no session state, so any replica serves any cookie.
"""

from __future__ import annotations

import grpc

from durable_ops.api.workspace.v1 import workspace_pb2 as pb
from durable_ops.api.workspace.v1 import workspace_pb2_grpc as pb_grpc
from durable_ops.gateway.backends import Backends, translate
from durable_ops.gateway.outages import watched

BACKEND = "workspace"


class Ended(Exception):
    """The credential names no live session, or a revoked token; the reason stays here."""


def _failed(exc: grpc.aio.AioRpcError) -> Exception:
    """``Ended`` for the user's credential; a refused gateway credential stays a 503."""
    error = translate(exc)
    if error.kind == "unauthenticated":
        return Ended(error.code)
    return error


async def _resolve(backends: Backends, request: pb.ResolveSessionRequest) -> str:
    stub = backends.stub(BACKEND, pb_grpc.WorkspaceServiceStub)
    try:
        with watched(backends, BACKEND):
            reply = await stub.ResolveSession(
                request, metadata=backends.caller.metadata(), timeout=backends.call_timeout
            )
    except grpc.aio.AioRpcError as exc:
        raise _failed(exc) from exc
    return reply.user_id


async def resolve_cookie(backends: Backends, session_id: str) -> str:
    """The owner of the live session ``session_id``, else ``Ended``."""
    return await _resolve(backends, pb.ResolveSessionRequest(session_id=session_id))


async def check_token(backends: Backends, user_id: str, issued_at: int) -> None:
    """``Ended`` when ``user_id``'s tokens issued at ``issued_at`` were revoked."""
    token = pb.VerifiedToken(user_id=user_id, issued_at=issued_at)
    await _resolve(backends, pb.ResolveSessionRequest(token=token))


async def create(
    backends: Backends, user_id: str, ttl_seconds: int, *, token_issued_at: int | None = None
) -> str:
    """A new session of ``user_id``; its id, for the cookie. ``Ended`` for a revoked token."""
    stub = backends.stub(BACKEND, pb_grpc.WorkspaceServiceStub)
    request = pb.CreateSessionRequest(ttl_seconds=ttl_seconds)
    if token_issued_at is not None:
        request.token_issued_at = token_issued_at
    try:
        with watched(backends, BACKEND):
            reply = await stub.CreateSession(
                request, metadata=backends.metadata(user_id), timeout=backends.call_timeout
            )
    except grpc.aio.AioRpcError as exc:
        raise _failed(exc) from exc
    return reply.session_id


async def end(backends: Backends, session_id: str) -> None:
    """Delete the session ``session_id`` (already gone is fine: the outcome is the same)."""
    stub = backends.stub(BACKEND, pb_grpc.WorkspaceServiceStub)
    try:
        with watched(backends, BACKEND):
            await stub.DeleteSession(
                pb.DeleteSessionRequest(session_id=session_id),
                metadata=backends.caller.metadata(),
                timeout=backends.call_timeout,
            )
    except grpc.aio.AioRpcError as exc:
        raise translate(exc) from exc
