"""Browser sessions: sign in with a token, sign out.

``POST /auth/login`` turns a token from ``opsctl token`` into a server-side
session (``gateway.sessions``) whose opaque id the cookie carries, for as long
as the token is valid and at most 7 days (``auth.SESSION_COOKIE_MAX_AGE_SECONDS``);
a token revoked by ``opsctl sessions revoke`` makes none. ``POST /auth/logout``
deletes the session and clears the cookie, so a copy of the cookie is worth
nothing afterwards.
The POSTs refuse other origins (``auth.check_same_origin``); the API's own
cookie-authenticated writes must also name theirs (``auth.require_user``).
Development sign-in is ``devlogin``, mounted only where it is safe.

Sign-in attempts are throttled (``throttle_sign_in``): a token bucket per client
address (the ASGI client, as corrected for trusted proxies; IPv6 by its /64)
and per user (the one a token that verified names, dev-login's ``user``; never an
unverified ``sub``, which let anyone lock a chosen user out of signing in),
each a burst of ``SIGN_IN_BURST`` then one attempt every
``SIGN_IN_REFILL_SECONDS``: at most 19 a minute, far fewer than 100 failures.
Every attempt takes a token, a successful one too (and no more); a throttled
one gets 429 ``too_many_sign_ins`` with ``Retry-After`` and takes none. The
buckets live in this gateway process's memory (``limits.Throttle``).

An operator sees both in the log, at warning: ``login_refused`` for each refused
sign-in (the client address and a reason code; the owner only once a token verified
and so named one: never a claimed ``sub`` nor a token) and ``login_throttled`` once
per throttled key and window (``limits``), with the attempts refused since its last.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jwt
import structlog
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from durable_ops.gateway import sessions
from durable_ops.gateway.auth import (
    MAX_TOKEN_LENGTH,
    SESSION_COOKIE,
    InvalidToken,
    check_same_origin,
    clear_session_cookie,
    session_lifetime,
    session_user,
    set_session_cookie,
    token_issued_at,
    token_lifetime,
    verify_with_settings,
)
from durable_ops.gateway.bodies import json_object, string_field
from durable_ops.gateway.context import backends_of, settings_of, sign_in_throttle_of
from durable_ops.gateway.events import stream_signals_of
from durable_ops.gateway.limits import LimitExceeded, Throttle, client_key
from durable_ops.gateway.openapi import endpoint, errors, json_body, ok, single_line_text
from durable_ops.gateway.problems import Problem
from durable_ops.model import bounds
from durable_ops.model.errors import InvalidArgument

SIGN_IN_BURST = 10
SIGN_IN_REFILL_SECONDS = 6.0
_USER_KEY = "user:"
_USER_KEY_MAX = 256  # characters of a user kept as a throttle key

_log = structlog.get_logger(__name__)


def sign_in_throttle() -> Throttle:
    """The throttle ``create_app`` keeps for sign-in attempts."""
    return Throttle(SIGN_IN_BURST, SIGN_IN_REFILL_SECONDS)


def throttle_sign_in(request: Request, user: str | None) -> None:
    """Count a sign-in attempt from this client (and for ``user``), or 429."""
    keys = [client_key(_client(request))]
    if user:
        keys.append(_USER_KEY + user[:_USER_KEY_MAX])
    try:
        sign_in_throttle_of(request).attempt(keys)
    except LimitExceeded as exc:
        for key, refused in exc.reported.items():
            by_user = key.startswith(_USER_KEY)
            owner = _owner(user) if by_user else None
            _log.warning(
                "login_throttled",
                throttled="user" if by_user else "client",
                client=_client(request),
                **({"owner": owner} if owner else {}),
                retry_after_seconds=exc.retry_after,
                refused_attempts=refused,
            )
        raise Problem(
            429,
            "too_many_sign_ins",
            f"too many sign-in attempts; try again in {exc.retry_after} seconds",
            headers={"Retry-After": str(exc.retry_after)},
        ) from None


def _client(request: Request) -> str | None:
    """The client's address, as corrected for trusted proxies."""
    return request.client.host if request.client else None


def _owner(user: str | None) -> str | None:
    """``user`` as a log line's ``owner`` when it is a user id at all: dev-login counts
    what the form said before it checks it, and a log line carries no user content."""
    try:
        return bounds.owner_id(user) if user else None
    except InvalidArgument:
        return None


def _token_refusal(exc: InvalidToken) -> str:
    """The reason code of a token that did not verify (its claims are never logged)."""
    if isinstance(exc.__cause__, jwt.ExpiredSignatureError):
        return "token_expired"
    if isinstance(exc.__cause__, jwt.InvalidSignatureError):
        return "token_signature_invalid"  # another secret signed it (OPS_JWT_SECRET)
    return "token_invalid"


def _refused(request: Request, reason: str, user: str | None = None) -> Problem:
    _log.warning(
        "login_refused",
        client=_client(request),
        reason=reason,
        **({"owner": user} if user else {}),
    )
    return Problem(401, "unauthenticated", "the token is invalid, expired or revoked")


async def login(request: Request) -> Response:
    check_same_origin(request)
    body = await json_object(request, ("token",), max_bytes=8192)
    token = (string_field(body, "token", max_length=MAX_TOKEN_LENGTH) or "").strip()
    try:
        user = verify_with_settings(settings_of(request), token)
    except InvalidToken as exc:
        throttle_sign_in(request, None)  # counted for its client address alone
        raise _refused(request, _token_refusal(exc)) from None
    throttle_sign_in(request, user)
    try:
        lifetime = session_lifetime(token_lifetime(token))
        session_id = await sessions.create(
            backends_of(request), user, lifetime, token_issued_at=token_issued_at(token)
        )
    except InvalidToken as exc:
        raise _refused(request, _token_refusal(exc), user) from None
    except sessions.Ended as exc:
        raise _refused(request, str(exc), user) from None  # the service's code: token_revoked
    response = JSONResponse({"user": user})
    set_session_cookie(response, request, session_id, lifetime)
    return response


async def logout(request: Request) -> Response:
    check_same_origin(request)
    session_id = request.cookies.get(SESSION_COOKIE)
    if session_id:
        user = await session_user(request)
        await sessions.end(backends_of(request), session_id)
        if user is not None:  # its open streams here end now, not at their next event
            stream_signals_of(request).session_ended(user)
    response = Response(status_code=204)
    clear_session_cookie(response, request)
    return response


routes: Sequence[BaseRoute] = [
    Route("/auth/login", login, methods=["POST"]),
    Route("/auth/logout", logout, methods=["POST"]),
]

_TAG = "auth"
openapi_schemas: Mapping[str, Any] = {
    "LoginRequest": {
        "type": "object",
        "required": ["token"],
        "additionalProperties": False,
        "properties": {
            "token": {
                **single_line_text(MAX_TOKEN_LENGTH),
                "description": "a token from `opsctl token` (blanks at its edges are trimmed)",
            }
        },
    },
    "LoginResponse": {
        "type": "object",
        "required": ["user"],
        "properties": {"user": {"type": "string"}},
    },
}
openapi_paths: Mapping[str, Mapping[str, Any]] = {
    "/auth/login": {
        "post": endpoint(
            "Sign in with a token: sets the HttpOnly session cookie",
            "login",
            _TAG,
            {
                "200": ok("signed in", {"$ref": "#/components/schemas/LoginResponse"}),
                **errors(400, 401, 403, 413, 415, 429, 503),
            },
            request_body=json_body({"$ref": "#/components/schemas/LoginRequest"}),
            secured=False,
        )
    },
    "/auth/logout": {
        "post": endpoint(
            "Sign out: ends the session and clears its cookie",
            "logout",
            _TAG,
            {"204": {"description": "signed out"}, **errors(403, 503)},
            secured=False,
        )
    },
}
