"""The operator console (issue 37, point 5; ADR 0045): a page and its JSON under ``/console``.

Signing in: ``opsctl console link`` (the operator's own key) prints
``<gateway>/console/sign-in#link=<secret>``, a link that works once, for ten
minutes. The secret rides in the fragment, so it is in no request line, log
or ``Referer``; the sign-in page puts it in its form and the operator presses
the button (a POST naming this origin, throttled as the users' sign-in), which
spends it on a console session of eight hours. Its id is the ``ops_console``
cookie: HttpOnly, SameSite=Strict, ``Path=/console`` (the owner pages never
see it), Secure under https. "Sign out" ends the session at once.

Who may do what: every route here reads the ``ops_console`` cookie and nothing
else: an owner's ``ops_session`` cookie or bearer token is never read, so it
gets the sign-in page or a 401 with no data. Each API call names the session
to the operator service (``console_calls``), which checks it and logs every
action with the operator's name. Writes (the bulk cancel and retry, sign-in,
sign-out) must name this origin (``auth.check_same_origin``), as the owner
pages' cookie writes must.

A bulk action is a list of at most ``model.console.BULK_MAX`` ids, each the
owner's own cancel or retry in its own transaction; the answer says, per id,
what became of it. A list naming anything that cannot be an id (the pattern the
API document states) is refused whole (400 naming ``ids``), nothing done. The page
asks first, naming the count ("Retry 12 operations?").

Paused task types (``opsctl tasks pause``): ``queues`` lists them; the page shows
them in a panel of their own and marks them in the queue table.
"""

from __future__ import annotations

import asyncio
import html
from collections.abc import Mapping, Sequence
from datetime import UTC, timedelta
from pathlib import Path
from string import Template
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Route

from durable_ops.api.operator.v1 import operator_pb2 as opb
from durable_ops.clock import utc_now
from durable_ops.gateway import console_calls, dto
from durable_ops.gateway.auth import check_same_origin
from durable_ops.gateway.bodies import json_object, string_field
from durable_ops.gateway.console_calls import ConsoleCalls, ConsoleEnded
from durable_ops.gateway.context import backends_of
from durable_ops.gateway.ids import resource_id
from durable_ops.gateway.login import throttle_sign_in
from durable_ops.gateway.openapi import (
    ID_PATTERN,
    PAGE_PARAMETERS,
    endpoint,
    errors,
    json_body,
    ok,
    path_id,
    query,
    single_line_text,
)
from durable_ops.gateway.pagination import page_request, query_params
from durable_ops.gateway.problems import Problem, invalid, problem_from_domain
from durable_ops.model import bounds, console
from durable_ops.model.errors import DomainError, InvalidArgument, NotFound
from durable_ops.model.operator import parse_duration

COOKIE = "ops_console"
COOKIE_PATH = "/console"
SIGN_IN_PATH = "/console/sign-in"
WEB_DIR = Path(__file__).parent / "web"
_LINK_MAX = 256  # characters of a pasted sign-in link (its secret is 43)
LIST_PARAMETERS = (
    "owner",
    "state",
    "task_type",
    "older_than",
    "failure_code",
    "page_size",
    "page_token",
)


# ---- the session cookie ------------------------------------------------------------------------


def _set_cookie(response: Response, request: Request, session_id: str, max_age: int) -> None:
    response.set_cookie(
        COOKIE,
        session_id,
        max_age=max(1, min(max_age, console.SESSION_SECONDS)),
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def _clear_cookie(response: Response, request: Request) -> None:
    response.delete_cookie(
        COOKIE,
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def _check_same_origin(request: Request) -> None:
    """A console write names this origin; the console takes no bearer token, so a
    refusal never offers one."""
    check_same_origin(request, require_origin=True, bearer_accepted=False)


def _sign_in_required() -> Problem:
    return Problem(
        401,
        "operator_sign_in_required",
        "sign in to the operator console with a link from `opsctl console link`",
    )


def _calls(request: Request) -> ConsoleCalls:
    """The console calls of this request's session; 401 without a console cookie."""
    session_id = request.cookies.get(COOKIE, "")
    if not console.plausible_secret(session_id):
        raise _sign_in_required()
    return ConsoleCalls(backends_of(request), session_id)


def _ended(request: Request) -> Response:
    response = _sign_in_required().response()
    _clear_cookie(response, request)
    return response


# ---- wire shapes ------------------------------------------------------------------------------


def _usage(message: Any, field: str) -> dict[str, Any] | None:
    return dto.usage(getattr(message, field)) if message.HasField(field) else None


def attempt_json(message: opb.OperatorAttempt) -> dict[str, Any]:
    return {
        "attempt": message.attempt,
        "route": message.route,
        "started_at": dto.time_or_none(message, "started_at"),
        "lease_expires_at": dto.time_or_none(message, "lease_expires_at"),
        "ended_at": dto.time_or_none(message, "ended_at"),
        "outcome": message.outcome or None,
        "failure_code": message.failure_code or None,
        "failure_message": message.failure_message or None,
        "provider": message.provider or None,
        "model": message.model or None,
        "usage": _usage(message, "usage"),
    }


def operation_json(message: opb.OperatorOperation) -> dict[str, Any]:
    """The owner's view of an operation, plus what an operator sees (ADR 19)."""
    return {
        **dto.operation(message.operation),
        "owner_id": message.owner_id,
        "priority": message.priority,
        "lease_expires_at": dto.time_or_none(message, "lease_expires_at"),
        "failure_code": message.failure_code or None,
        "failure_message": message.failure_message or None,
        "attempts": [attempt_json(attempt) for attempt in message.attempts],
    }


def queue_json(message: opb.QueueDepth) -> dict[str, Any]:
    return {
        "task_type": message.task_type,
        "queued": message.queued,
        "running": message.running,
        "waiting_for_retry": message.waiting_for_retry,
        "waiting_for_external_fallback": message.waiting_for_external_fallback,
        "oldest_queued_at": dto.time_or_none(message, "oldest_queued_at"),
    }


def list_request(params: Mapping[str, str]) -> opb.ListOperationsRequest:
    """The search of the console's list: each filter empty for any; 400 for a bad one.
    ``params`` come from ``query_params``, which refused control characters in them."""
    page = page_request(params)
    request = opb.ListOperationsRequest(
        page_size=page.size,
        page_token=page.token,
        owner_id=params.get("owner", "").strip(),
        task_type=params.get("task_type", "").strip(),
        failure_code=params.get("failure_code", "").strip(),
    )
    state = params.get("state", "")
    if state:
        try:
            request.state = dto.state_value(state)
        except ValueError:
            raise invalid("state", f"must be one of {', '.join(dto.STATE_NAMES)}") from None
    older_than = params.get("older_than", "").strip()
    if older_than:
        try:
            age: timedelta = parse_duration(older_than)
        except ValueError as exc:  # the CLI's --older-than words it the same (one rule)
            raise invalid("older_than", str(exc)) from None
        request.older_than.FromTimedelta(age)
    return request


# ---- the pages ---------------------------------------------------------------------------------


def _template(name: str) -> Template:
    return Template((WEB_DIR / name).read_text(encoding="utf-8"))


_PAGE = _template("console.html")
_SIGN_IN = _template("console-signin.html")
_MAIN = _template("console-main.html")


def _page(*, title: str, module: str, operator: str | None, main: str) -> HTMLResponse:
    body = _PAGE.substitute(
        title=html.escape(title),
        module=module,
        signed_in="true" if operator is not None else "false",
        operator=html.escape(operator or ""),
        main=main,
        header_hidden="" if operator is not None else " hidden",
    )
    return HTMLResponse(body)


def _sign_in_page(*, ended: bool = False) -> HTMLResponse:
    notice = "Your console session ended. Sign in again with a new link." if ended else ""
    main = _SIGN_IN.substitute(notice=html.escape(notice), notice_hidden="" if ended else " hidden")
    return _page(title="Operator sign-in", module="console-signin", operator=None, main=main)


async def console_page(request: Request) -> Response:
    """The console when signed in to it; else its sign-in page (no data either way)."""
    if COOKIE not in request.cookies:
        return _sign_in_page()
    try:
        session = await console_calls.who(_calls(request))
    except (ConsoleEnded, Problem):
        response: Response = _sign_in_page(ended=True)
        _clear_cookie(response, request)
        return response
    main = _MAIN.substitute(bulk_max=str(console.BULK_MAX))
    return _page(title="Operator console", module="console", operator=session.operator, main=main)


async def sign_in_page(_request: Request) -> Response:
    return _sign_in_page()


def link_secret(text: str) -> str:
    """The secret of a pasted link (``…#link=SECRET``) or of the bare secret."""
    text = text.strip()
    _, marker, after = text.partition("link=")
    return (after if marker else text).strip()


async def sign_in(request: Request) -> Response:
    _check_same_origin(request)
    body = await json_object(request, ("link",), max_bytes=1024)
    link = link_secret(string_field(body, "link", max_length=_LINK_MAX) or "")
    throttle_sign_in(request, None)
    if not console.plausible_secret(link):
        raise Problem(401, console.LINK_UNUSABLE, console.link_unusable().message)
    session = await console_calls.open_session(backends_of(request), link)
    max_age = int((session.expires_at.ToDatetime(tzinfo=UTC) - utc_now()).total_seconds())
    response = JSONResponse(
        {"operator": session.operator, "expires_at": dto.time_or_none(session, "expires_at")},
    )
    _set_cookie(response, request, session.session_id, max_age)
    return response


async def sign_out(request: Request) -> Response:
    _check_same_origin(request)
    session_id = request.cookies.get(COOKIE, "")
    if console.plausible_secret(session_id):
        await console_calls.end(ConsoleCalls(backends_of(request), session_id))
    response = Response(status_code=204)
    _clear_cookie(response, request)
    return response


# ---- the API -----------------------------------------------------------------------------------


async def session_info(request: Request) -> Response:
    try:
        session = await console_calls.who(_calls(request))
    except ConsoleEnded:
        return _ended(request)
    return JSONResponse(
        {"operator": session.operator, "expires_at": dto.time_or_none(session, "expires_at")},
    )


async def list_operations(request: Request) -> Response:
    calls = _calls(request)
    message = list_request(query_params(request, LIST_PARAMETERS))
    try:
        page = await calls(calls.stub.ListOperations, message)
    except ConsoleEnded:
        return _ended(request)
    items = [operation_json(found) for found in page.operations]
    return JSONResponse({"items": items, "next_page_token": page.next_page_token or None})


def _not_found() -> NotFound:
    return NotFound("operation not found", code="operation_not_found")


async def show_operation(request: Request) -> Response:
    calls = _calls(request)
    operation_id = resource_id(request, _not_found)
    try:
        found = await calls(
            calls.stub.GetOperation, opb.GetOperationRequest(operation_id=operation_id)
        )
    except ConsoleEnded:
        return _ended(request)
    return JSONResponse(operation_json(found))


async def queues(request: Request) -> Response:
    calls = _calls(request)
    try:
        found, types = await asyncio.gather(  # both at once: the page refreshes them together
            calls(calls.stub.GetQueueDepths, opb.GetQueueDepthsRequest()),
            calls(calls.stub.ListTaskTypes, opb.ListTaskTypesRequest()),
        )
    except ConsoleEnded:
        return _ended(request)
    return JSONResponse(
        {
            "queues": [queue_json(depth) for depth in found.queues],
            "read_at": dto.time_or_none(found, "read_at"),
            # Paused by an operator (`opsctl tasks pause`): not claimed until resumed.
            "paused_task_types": [t.task_type for t in types.task_types if t.paused],
        },
    )


def _ids(body: Mapping[str, Any]) -> list[str]:
    raw = body.get("ids")
    if not isinstance(raw, list) or not all(isinstance(item, str) for item in raw):
        raise invalid("ids", "must be a list of operation ids")
    # One that could never have been issued ("\u0000") is the request's fault, not a missing
    # operation: the whole request is refused, nothing done, and the id is not echoed.
    for number, item in enumerate(raw, start=1):
        if not bounds.could_be_id(item):
            raise invalid("ids", f"must be a list of operation ids; item {number} cannot be one")
    try:
        return console.bulk_ids(raw)
    except InvalidArgument as exc:
        raise invalid("ids", exc.reason) from None


async def _bulk(request: Request, verb: str) -> Response:
    _check_same_origin(request)
    calls = _calls(request)
    body = await json_object(request, ("ids",), max_bytes=16384)
    ids = _ids(body)
    method = calls.stub.CancelOperation if verb == "cancel" else calls.stub.RetryOperation
    request_type = opb.CancelOperationRequest if verb == "cancel" else opb.RetryOperationRequest
    results: list[dict[str, Any]] = []
    for operation_id in ids:
        try:
            done = await calls(method, request_type(operation_id=operation_id))
        except ConsoleEnded:
            return _ended(request)
        except DomainError as error:  # this one only (a race, not retryable): the rest go on
            problem = problem_from_domain(error)
            results.append(_refused(operation_id, problem.code, problem.detail))
            continue
        results.append({"id": operation_id, "ok": True, "operation": operation_json(done)})
    done_count = sum(1 for result in results if result["ok"])
    return JSONResponse(
        {"results": results, "succeeded": done_count, "failed": len(results) - done_count},
    )


def _refused(operation_id: str, code: str, detail: str) -> dict[str, Any]:
    return {"id": operation_id, "ok": False, "code": code, "detail": detail}


async def bulk_cancel(request: Request) -> Response:
    return await _bulk(request, "cancel")


async def bulk_retry(request: Request) -> Response:
    return await _bulk(request, "retry")


routes: Sequence[BaseRoute] = [
    Route("/console", console_page, methods=["GET"]),
    Route(SIGN_IN_PATH, sign_in_page, methods=["GET"]),
    Route(SIGN_IN_PATH, sign_in, methods=["POST"]),
    Route("/console/sign-out", sign_out, methods=["POST"]),
    Route("/console/api/session", session_info, methods=["GET"]),
    Route("/console/api/operations", list_operations, methods=["GET"]),
    Route("/console/api/operations/{id}", show_operation, methods=["GET"]),
    Route("/console/api/queues", queues, methods=["GET"]),
    Route("/console/api/cancel", bulk_cancel, methods=["POST"]),
    Route("/console/api/retry", bulk_retry, methods=["POST"]),
]

# ---- OpenAPI -----------------------------------------------------------------------------------

_TAG = "console"
_HTML = {"description": "HTML page", "content": {"text/html": {"schema": {"type": "string"}}}}
_SECURITY: list[dict[str, list[str]]] = [{"consoleAuth": []}]


def _console_endpoint(
    summary: str, operation_id: str, responses: dict[str, Any], **options: Any
) -> dict[str, Any]:
    described = endpoint(
        summary, operation_id, _TAG, {**responses, **errors(401)}, secured=False, **options
    )
    described["security"] = _SECURITY
    return described


_TEXT = single_line_text(bounds.PAGE_TOKEN_MAX, required=False)  # as ``query_params``
_OWNER = {"type": "string", "maxLength": bounds.OWNER_ID_MAX, "pattern": "^[A-Za-z0-9._@:-]*$"}
_TASK_TYPE = {"type": "string", "maxLength": bounds.TASK_TYPE_MAX, "pattern": "^[a-z0-9._-]*$"}
_FAILURE_CODE = single_line_text(bounds.FAILURE_CODE_MAX, required=False)
_IDS_BODY = json_body(
    {
        "type": "object",
        "required": ["ids"],
        "additionalProperties": False,
        "properties": {
            "ids": {
                "type": "array",
                "minItems": 1,
                "maxItems": console.BULK_MAX,
                "items": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": bounds.ID_MAX,
                    "pattern": ID_PATTERN,
                },
            }
        },
    }
)
openapi_schemas: Mapping[str, Any] = {
    "ConsoleOperation": {
        "description": "an Operation plus what an operator sees: owner, priority, lease,"
        " failure code and message, and (in a detail) every attempt with its tokens",
        "type": "object",
    },
    "ConsoleBulkResult": {
        "type": "object",
        "required": ["results", "succeeded", "failed"],
        "properties": {
            "results": {"type": "array", "items": {"type": "object"}},
            "succeeded": {"type": "integer"},
            "failed": {"type": "integer"},
        },
    },
}
_BULK_ANSWER = ok("what became of each", {"$ref": "#/components/schemas/ConsoleBulkResult"})
openapi_paths: Mapping[str, Mapping[str, Any]] = {
    "/console": {
        "get": endpoint(
            "Operator console page (its sign-in page without a console session)",
            "pageConsole",
            _TAG,
            {"200": _HTML},
            secured=False,
        )
    },
    SIGN_IN_PATH: {
        "get": endpoint(
            "Operator sign-in page; the link from `opsctl console link` carries its secret"
            " in the fragment (#link=...)",
            "pageConsoleSignIn",
            _TAG,
            {"200": _HTML},
            secured=False,
        ),
        "post": endpoint(
            "Spend a one-time sign-in link on a console session: sets the `ops_console`"
            " cookie (Path=/console, HttpOnly, SameSite=Strict); must name this origin",
            "consoleSignIn",
            _TAG,
            {
                "200": ok("signed in", {"type": "object"}),
                **errors(400, 401, 403, 413, 415, 429, 503),
            },
            request_body=json_body(
                {
                    "type": "object",
                    "required": ["link"],
                    "additionalProperties": False,
                    "properties": {"link": {"type": "string", "maxLength": _LINK_MAX}},
                }
            ),
            secured=False,
        ),
    },
    "/console/sign-out": {
        "post": endpoint(
            "End the console session and clear its cookie",
            "consoleSignOut",
            _TAG,
            {"204": {"description": "signed out"}, **errors(403, 503)},
            secured=False,
        )
    },
    "/console/api/session": {
        "get": _console_endpoint(
            "The signed-in operator and when the session ends",
            "consoleSession",
            {"200": ok("the session", {"type": "object"}), **errors(503)},
        )
    },
    "/console/api/operations": {
        "get": _console_endpoint(
            "Operations of every owner, newest first, searched",
            "consoleListOperations",
            {"200": ok("a page", {"type": "object"}), **errors(400, 503)},
            parameters=[
                query("owner", _OWNER, "this owner only"),
                query("state", {"type": "string", "enum": list(dto.STATE_NAMES)}, "this state"),
                query("task_type", _TASK_TYPE, "this task type only"),
                query("older_than", _TEXT, "created at least this long ago: 30m, 2h, 7d"),
                query("failure_code", _FAILURE_CODE, "this failure code only"),
                *PAGE_PARAMETERS,
            ],
        )
    },
    "/console/api/operations/{id}": {
        "get": _console_endpoint(
            "One operation of any owner, with its attempt history",
            "consoleShowOperation",
            {
                "200": ok("the operation", {"$ref": "#/components/schemas/ConsoleOperation"}),
                **errors(404, 503),
            },
            parameters=[path_id("the operation id")],
        )
    },
    "/console/api/queues": {
        "get": _console_endpoint(
            "Unfinished operations and the oldest queued one, per task type",
            "consoleQueues",
            {"200": ok("queue depths", {"type": "object"}), **errors(503)},
        )
    },
    "/console/api/cancel": {
        "post": _console_endpoint(
            "Cancel the operations named, each as its owner's own cancel",
            "consoleBulkCancel",
            {
                "200": _BULK_ANSWER,
                **errors(400, 403, 413, 415, 503),
            },
            request_body=_IDS_BODY,
        )
    },
    "/console/api/retry": {
        "post": _console_endpoint(
            "Retry the operations named, each as its owner's own retry",
            "consoleBulkRetry",
            {
                "200": _BULK_ANSWER,
                **errors(400, 403, 413, 415, 503),
            },
            request_body=_IDS_BODY,
        )
    },
}
