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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

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
    set_session_cookie,
    token_issued_at,
    token_lifetime,
    verify_with_settings,
)
from durable_ops.gateway.bodies import json_object, string_field
from durable_ops.gateway.context import backends_of, settings_of
from durable_ops.gateway.openapi import endpoint, errors, json_body, ok, single_line_text
from durable_ops.gateway.problems import Problem


async def login(request: Request) -> Response:
    check_same_origin(request)
    body = await json_object(request, ("token",), max_bytes=8192)
    token = (string_field(body, "token", max_length=MAX_TOKEN_LENGTH) or "").strip()
    try:
        user = verify_with_settings(settings_of(request), token)
        lifetime = session_lifetime(token_lifetime(token))
        session_id = await sessions.create(
            backends_of(request), user, lifetime, token_issued_at=token_issued_at(token)
        )
    except (InvalidToken, sessions.Ended):
        raise Problem(401, "unauthenticated", "the token is invalid, expired or revoked") from None
    response = JSONResponse({"user": user})
    set_session_cookie(response, request, session_id, lifetime)
    return response


async def logout(request: Request) -> Response:
    check_same_origin(request)
    session_id = request.cookies.get(SESSION_COOKIE)
    if session_id:
        await sessions.end(backends_of(request), session_id)
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
                **errors(400, 401, 403, 413, 415, 503),
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
