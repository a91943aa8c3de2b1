"""``POST /auth/dev-login``: sign in as any user, on a development stack only.

``create_app`` mounts this module only when ``hosts.serves_dev_login``
(OPS_DEV_LOGIN on and the gateway listening on loopback alone); otherwise the
path does not exist (404). It is the sign-in page's form (field ``user``), a
POST that must name this origin (``auth.check_same_origin``), so neither a
cross-site navigation (a GET: 405) nor a cross-site form signs anyone in: a
forged session would show the victim the attacker's data (login CSRF).
Its attempts are throttled as ``/auth/login``'s (``login.throttle_sign_in``).
Signed in, the browser goes to ``?next`` (the page whose session ended, which the
sign-in page puts in the form's address) when that is a path of this site, else to
``/operations``.

A refused sign-in answers a browser's form post (its ``Accept`` names
``text/html``) with the sign-in page again, saying why beside the form (too
many attempts: when to try again) with the problem's status and
``Retry-After``; an API client gets the problem+json (``web.form_refused``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from durable_ops.gateway import sessions
from durable_ops.gateway.auth import check_same_origin, set_session_cookie
from durable_ops.gateway.bodies import FORM, form_fields
from durable_ops.gateway.context import backends_of
from durable_ops.gateway.login import throttle_sign_in
from durable_ops.gateway.openapi import endpoint, errors
from durable_ops.gateway.problems import Problem, invalid, problem_from_domain
from durable_ops.gateway.web import DEV_LOGIN_USER, form_refused, wants_a_page
from durable_ops.model import bounds
from durable_ops.model.errors import DomainError, InvalidArgument

DEV_LOGIN_TTL_SECONDS = 8 * 3600
AFTER_LOGIN = "/operations"
# A path of this site: "/" not followed by a slash or a backslash ("//host", and "/\host",
# which browsers read as it, lead to another site), and no backslash, white space or
# control character anywhere.
_SITE_PATH = re.compile(r"/(?![/\\])[^\\\s\x00-\x1f\x7f]*")
NEXT_MAX = 2048


def after_sign_in(next_path: str) -> str:
    """Where a sign-in leads: ``next_path`` when it is a path of this site, else /operations.
    Never elsewhere: an open redirect would hand a freshly signed-in user to any site."""
    if len(next_path) > NEXT_MAX or next_path == "/" or not _SITE_PATH.fullmatch(next_path):
        return AFTER_LOGIN
    return next_path


async def dev_login(request: Request) -> Response:
    user = DEV_LOGIN_USER  # until the form's is read
    try:
        check_same_origin(request, require_origin=True)
        user = (await form_fields(request, ("user",), max_bytes=1024)).get("user", "")
        return await _sign_in(request, user)
    except (Problem, DomainError) as exc:
        if not wants_a_page(request):
            raise
        problem = exc if isinstance(exc, Problem) else problem_from_domain(exc)
        return form_refused(request, problem, user)


async def _sign_in(request: Request, user: str) -> Response:
    throttle_sign_in(request, user)
    try:
        bounds.owner_id(user)
    except InvalidArgument as exc:
        raise invalid("user", exc.reason) from None
    session_id = await sessions.create(backends_of(request), user, DEV_LOGIN_TTL_SECONDS)
    after = after_sign_in(request.query_params.get("next", ""))
    response = RedirectResponse(after, status_code=303)
    set_session_cookie(response, request, session_id, DEV_LOGIN_TTL_SECONDS)
    return response


routes: Sequence[BaseRoute] = [Route("/auth/dev-login", dev_login, methods=["POST"])]
openapi_schemas: Mapping[str, Any] = {}
openapi_paths: Mapping[str, Mapping[str, Any]] = {
    "/auth/dev-login": {
        "post": endpoint(
            "Development sign-in as any user: sets the session cookie and redirects to"
            " `next` when that is a path of this site, else to /operations. Served only with"
            " OPS_DEV_LOGIN=1 on a gateway that listens on"
            " loopback alone (absent otherwise); the request must name this origin"
            " (`Origin`, or a same-origin `Referer`). A refused browser form post (`Accept`"
            " naming text/html) gets the sign-in page again, saying why, with the same status",
            "devLogin",
            "auth",
            {
                "303": {
                    "description": "signed in; `Set-Cookie: ops_session=...`",
                    "headers": {"Location": {"schema": {"type": "string"}}},
                },
                **errors(400, 403, 413, 415, 429, 503),
            },
            request_body={
                "required": True,
                "content": {
                    FORM: {
                        "schema": {
                            "type": "object",
                            "required": ["user"],
                            "additionalProperties": False,
                            "properties": {
                                "user": {
                                    "type": "string",
                                    "pattern": "^[A-Za-z0-9._@:-]+$",  # bounds.owner_id
                                    "maxLength": bounds.OWNER_ID_MAX,
                                    "description": "the user id to sign in as",
                                }
                            },
                        }
                    }
                },
            },
            parameters=[
                {
                    "name": "next",
                    "in": "query",
                    "required": False,
                    "description": "where to go once signed in: a path of this site"
                    " (anything else leads to /operations)",
                    "schema": {"type": "string", "maxLength": NEXT_MAX},
                }
            ],
            secured=False,
        )
    },
}
