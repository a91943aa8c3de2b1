"""The caller's scope (SPEC §2), built from invocation metadata.

The server interceptor verifies the service credential once per call and keeps
the key that signed it (its role, its name) in a context variable; grpc.aio runs
the handler in that same ``contextvars.Context``, so ``caller_scope`` reads the
role from there and only has to interpret ``x-owner-id``, and ``caller_key``
names the key the call's bounds are counted against (``rpc.open_calls``).

Problems with the credential are ``Unauthenticated``; problems with the shape
of ``x-owner-id`` (empty, malformed, sent twice) are ``InvalidArgument``: the
credential is fine, the request is not, and a repeated header must never let
one of two identities win silently.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextvars import ContextVar

import jwt

from durable_ops.model import bounds
from durable_ops.model.errors import InvalidArgument, PermissionDenied, Unauthenticated
from durable_ops.model.scope import NeutralScope, OperatorScope, OwnerScope, Role, Scope
from durable_ops.rpc import ServicerContext
from durable_ops.rpc.credentials import verify_service_token
from durable_ops.rpc.keys import TrustedKey, TrustedKeys

AUTHORIZATION = "authorization"
OWNER_ID = "x-owner-id"
# The operator console's session id (ADR 0045): the gateway's only way into the operator
# scope, checked by the operator service against the sessions it keeps.
OPERATOR_SESSION = "x-operator-session"
NAME_MAX = 64  # of a credential's ``sub`` as logged

Metadata = Iterable[tuple[str, str | bytes]]

_verified_key: ContextVar[TrustedKey | None] = ContextVar("verified_service_key", default=None)


def _values(metadata: Metadata, key: str) -> list[str]:
    found = []
    for name, value in metadata:
        if name.lower() == key:
            found.append(value.decode("latin-1") if isinstance(value, bytes) else value)
    return found


def key_from_metadata(metadata: Metadata, trusted: TrustedKeys) -> TrustedKey:
    """Verify ``authorization: Bearer <service jwt>`` (exactly one such header): the
    trusted key that signed it."""
    headers = _values(metadata, AUTHORIZATION)
    if len(headers) != 1:
        raise Unauthenticated(
            "a single service credential is required", code="service_credential_required"
        )
    scheme, _, token = headers[0].partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthenticated(
            "a bearer service credential is required", code="service_credential_required"
        )
    return verify_service_token(trusted, token.strip())


def scope_for(role: Role, metadata: Metadata) -> Scope:
    """Owner scope with ``x-owner-id``; without it, neutral scope for workers only.

    The operator role has the operator scope, and only without ``x-owner-id``.
    """
    owners = _values(metadata, OWNER_ID)
    if len(owners) > 1:
        raise InvalidArgument(OWNER_ID, "must appear at most once")
    if role is Role.OPERATOR:
        # A third scope, never an owner's: an operator acts on owners' rows only through
        # the operator service, where every action is logged (ADR 19).
        if owners:
            raise PermissionDenied(
                "the operator role calls without x-owner-id", code="operator_scope_has_no_owner"
            )
        return OperatorScope()
    if owners:
        return OwnerScope(role, bounds.owner_id(owners[0]))
    if role is Role.WORKER:
        return NeutralScope()
    raise PermissionDenied(
        f"role {role.value} must call with x-owner-id", code="owner_scope_required"
    )


def remember_verified_key(key: TrustedKey) -> None:
    """Called by the interceptor in the context the handler will run in."""
    _verified_key.set(key)


def caller_key() -> TrustedKey:
    """The key that signed the current call's credential: who holds it, as the services
    know it (its name, shared by a key and its ``.previous`` one during a rotation), not
    as the credential's ``sub`` says, which its holder writes."""
    key = _verified_key.get()
    if key is None:
        # Only reachable without the credential interceptor: fail closed.
        raise Unauthenticated("no verified service credential", code="service_credential_required")
    return key


def caller_scope(context: ServicerContext) -> Scope:
    """The scope of the current call (SPEC §2)."""
    role = caller_key().role
    metadata: Metadata = context.invocation_metadata() or ()
    return scope_for(role, metadata)


def require_gateway_without_owner(context: ServicerContext) -> None:
    """Resolving or ending a session by its id: the gateway, before it knows the owner.

    The session id is the credential and the owner is the answer, so the call
    names none: an ``x-owner-id`` would be an identity nobody verified.
    """
    role = caller_key().role
    metadata: Metadata = context.invocation_metadata() or ()
    if role is not Role.GATEWAY or _values(metadata, OWNER_ID):
        raise PermissionDenied(
            "sessions are resolved by the gateway, without x-owner-id",
            code="gateway_scope_required",
        )


def console_session_of(context: ServicerContext) -> str | None:
    """The console session id a gateway call names (``x-operator-session``), else ``None``.

    Only the gateway's verified credential, without ``x-owner-id``, carries one: from
    any other role, or beside an owner, the header means nothing and is not read. The
    id is not checked here: the operator service resolves it (ADR 0045).
    """
    metadata: Metadata = context.invocation_metadata() or ()
    key = _verified_key.get()
    if key is None or key.role is not Role.GATEWAY or _values(metadata, OWNER_ID):
        return None
    sessions = _values(metadata, OPERATOR_SESSION)
    if len(sessions) > 1:
        raise InvalidArgument(OPERATOR_SESSION, "must appear at most once")
    return sessions[0] if sessions else None


def caller_name(context: ServicerContext) -> str:
    """Who holds the current call's credential (its ``sub``), for audit logs; "" if unnamed.

    Call it after ``caller_scope``: the interceptor verified this very token (the one
    ``authorization`` header) for this call, so its claims are only read here.
    """
    metadata: Metadata = context.invocation_metadata() or ()
    headers = _values(metadata, AUTHORIZATION)
    if _verified_key.get() is None or len(headers) != 1:
        return ""
    token = headers[0].partition(" ")[2].strip()
    try:
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError:
        return ""
    subject = claims.get("sub")
    return subject[:NAME_MAX] if isinstance(subject, str) else ""
