"""Browser sessions: put a token into the ``ops_session`` cookie, or take it out.

``GET /auth/dev-login?user=U`` exists only with ``OPS_DEV_LOGIN=1`` (404
otherwise); ``POST /auth/login`` turns a token from ``opsctl token`` into the
cookie, for as long as the token is valid and at most 7 days
(``auth.SESSION_COOKIE_MAX_AGE_SECONDS``); ``POST /auth/logout`` clears it.
The POSTs refuse other origins (``auth.check_same_origin``); the API's own
cookie-authenticated writes must also name theirs (``auth.require_user``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from durable_ops.gateway.auth import (
    MAX_TOKEN_LENGTH,
    InvalidToken,
    check_same_origin,
    clear_session_cookie,
    mint_user_token,
    set_session_cookie,
    token_lifetime,
    verify_with_settings,
)
from durable_ops.gateway.bodies import json_object, string_field
from durable_ops.gateway.context import settings_of
from durable_ops.gateway.openapi import endpoint, errors, json_body, ok, query, single_line_text
from durable_ops.gateway.pagination import query_params
from durable_ops.gateway.problems import Problem, invalid
from durable_ops.model import bounds
from durable_ops.model.errors import InvalidArgument

DEV_LOGIN_TTL_SECONDS = 8 * 3600
AFTER_LOGIN = "/operations"


async def dev_login(request: Request) -> Response:
    settings = settings_of(request)
    if not settings.dev_login:
        raise Problem(404, "not_found", "no such resource")
    user = query_params(request, ("user",)).get("user", "")
    try:
        bounds.owner_id(user)
    except InvalidArgument as exc:
        raise invalid("user", exc.reason) from None
    token = mint_user_token(
        settings.jwt_secret,
        user,
        DEV_LOGIN_TTL_SECONDS,
        issuer=settings.jwt_issuer,
        audience=settings.jwt_audience,
    )
    response = RedirectResponse(AFTER_LOGIN, status_code=303)
    set_session_cookie(response, request, token, DEV_LOGIN_TTL_SECONDS)
    return response


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
    Route("/auth/dev-login", dev_login, methods=["GET"]),
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
    "/auth/dev-login": {
        "get": endpoint(
            "Development sign-in: sets the session cookie and redirects to /operations "
            "(only with OPS_DEV_LOGIN=1; 404 otherwise)",
            "devLogin",
            _TAG,
            {
                "303": {
                    "description": "signed in; `Set-Cookie: ops_session=...`",
                    "headers": {"Location": {"schema": {"type": "string"}}},
                },
                **errors(400, 404),
            },
            parameters=[
                query("user", {"type": "string", "maxLength": bounds.OWNER_ID_MAX}, "user id")
            ],
            secured=False,
        )
    },
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
