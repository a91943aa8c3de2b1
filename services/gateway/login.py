"""Browser sessions: put a token into the ``ops_session`` cookie, or take it out.

``POST /auth/login`` turns a token from ``opsctl token`` into the
cookie, for as long as the token is valid and at most 7 days
(``auth.SESSION_COOKIE_MAX_AGE_SECONDS``); ``POST /auth/logout`` clears it.
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

from durable_ops.gateway.auth import (
    MAX_TOKEN_LENGTH,
    InvalidToken,
    check_same_origin,
    clear_session_cookie,
    set_session_cookie,
    token_lifetime,
    verify_with_settings,
)
from durable_ops.gateway.bodies import json_object, string_field
from durable_ops.gateway.context import settings_of
from durable_ops.gateway.openapi import endpoint, errors, json_body, ok, single_line_text
from durable_ops.gateway.problems import Problem


async def login(request: Request) -> Response:
    check_same_origin(request)
    body = await json_object(request, ("token",), max_bytes=8192)
    token = string_field(body, "token", max_length=MAX_TOKEN_LENGTH) or ""
    try:
        user = verify_with_settings(settings_of(request), token.strip())
    except InvalidToken:
        raise Problem(401, "unauthenticated", "the token is invalid or expired") from None
    response = JSONResponse({"user": user})
    set_session_cookie(response, request, token.strip(), token_lifetime(token.strip()))
    return response


async def logout(request: Request) -> Response:
    check_same_origin(request)
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
                **errors(400, 401, 403, 413, 415),
            },
            request_body=json_body({"$ref": "#/components/schemas/LoginRequest"}),
            secured=False,
        )
    },
    "/auth/logout": {
        "post": endpoint(
            "Sign out: clears the session cookie",
            "logout",
            _TAG,
            {"204": {"description": "signed out"}, **errors(403)},
            secured=False,
        )
    },
}
