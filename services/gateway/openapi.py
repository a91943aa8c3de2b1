"""``/openapi.json``: the document is assembled from what each route module declares.

A route module exports ``openapi_paths`` (OpenAPI path items, written next to
its routes with the helpers below) and ``openapi_schemas`` (its component
schemas). ``build_document`` merges them over the shared components here
(``Problem``, ``Operation``, ...) and refuses a path+method declared twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from durable_ops.gateway.bodies import BODY_SECONDS, NUMBER_DIGITS_MAX
from durable_ops.gateway.dto import STATE_NAMES
from durable_ops.gateway.hosts import UNCHECKED_PATHS
from durable_ops.gateway.modules import RouteModule
from durable_ops.gateway.problems import PROBLEM_JSON
from durable_ops.model import bounds
from durable_ops.model.bounds import PAGE_SIZE_DEFAULT, PAGE_SIZE_RANGE, PAGE_TOKEN_MAX

JsonObject = dict[str, Any]
METHODS = ("get", "put", "post", "delete", "patch")

# Served under any host name (``hosts``): what an orchestrator probes.
_PROBES = " and ".join(f"`{path}`" for path in sorted(UNCHECKED_PATHS))

ERROR_DESCRIPTIONS: Mapping[int, str] = {
    400: (
        "Invalid argument: a bound, type or format broken (`field` names it; code"
        " `control_character` for a control character in text or in a query parameter,"
        " or a bidi embedding, override or isolate in a one-line field;"
        " `null` for a field is one too: leave the field out instead); a query parameter"
        " the route does not take (`unknown_parameter`); or a body that is not JSON"
        " (`malformed_json`)"
        f" or holds a number of more than {NUMBER_DIGITS_MAX} digits (`number_too_long`);"
        " or a `Host` the gateway does not answer to (`host_not_allowed`, on every route but"
        f" the probes {_PROBES})"
    ),
    401: "Not signed in: missing, malformed, expired or wrongly signed token",
    403: (
        "Not allowed (code `plan_required`: AI switched on on the Free plan; also a"
        " cookie-authenticated change from another origin, `cross_origin_request`, or"
        " naming no origin, neither `Origin` nor a same-origin `Referer`: `origin_required`)"
    ),
    404: "No such resource for this user (another user's resource looks the same)",
    408: (
        f"The body did not arrive within {BODY_SECONDS:g} s of the request's head"
        " (`request_timeout`); the connection is closed"
    ),
    409: (
        "The resource's state does not allow this, or the idempotency key was used before"
        " (code `analysis_active`: an unfinished analysis uses the job or CV to delete;"
        " `operation_id` names it: cancel it first); on every signed-in route,"
        " `page_user_changed`: the `X-Ops-Page-User` header (the event stream's `page_user`)"
        " names another user than the credential's, and nothing was done"
    ),
    413: "The body is too large",
    415: "The body is not of the media type the operation takes (JSON unless it says)",
    429: (
        "Past a bound (`code` says which: capacity, budget, stored jobs and CVs, open waits,"
        " sign-in attempts); `Retry-After` says when to try again, and is absent when"
        " waiting would not help (a daily budget smaller than one analysis)"
    ),
    503: "A backend service is unavailable",
    504: "A backend service did not answer in time",
}


def ref(name: str) -> JsonObject:
    return {"$ref": f"#/components/schemas/{name}"}


def nullable(schema: JsonObject) -> JsonObject:
    return {"anyOf": [schema, {"type": "null"}]}


def json_body(schema: JsonObject, description: str = "", *, required: bool = True) -> JsonObject:
    return {
        "required": required,
        "description": description,
        "content": {"application/json": {"schema": schema}},
    }


def ok(description: str, schema: JsonObject | None = None) -> JsonObject:
    response: JsonObject = {"description": description}
    if schema is not None:
        response["content"] = {"application/json": {"schema": schema}}
    return response


def errors(*statuses: int) -> JsonObject:
    """Problem responses for ``statuses`` (500 is never documented: it would be a bug)."""
    found: JsonObject = {}
    for status in statuses:
        response: JsonObject = {
            "description": ERROR_DESCRIPTIONS[status],
            "content": {PROBLEM_JSON: {"schema": ref("Problem")}},
        }
        if status == 429:
            response["headers"] = {
                "Retry-After": {"schema": {"type": "integer", "minimum": 0}},
            }
        found[str(status)] = response
    return found


# The text rules of ``bounds.single_line``/``multi_line`` (and ``bodies.string_field``) as
# patterns, so a schema-valid string is one the server takes: no control character (a
# single line may have blanks at its edges, which are trimmed; a multi-line text keeps tab,
# LF and CR), and a required one has a character that is not white space.
_EDGE = r"[\t\n\r ]*"
_LINE_CHAR = bounds.LINE_CHAR
_TEXT_CHAR = bounds.TEXT_CHAR
_VISIBLE = bounds.VISIBLE_CHAR
ID_PATTERN = "^[A-Za-z0-9_-]+$"  # ``ids.resource_id``
PAGE_TOKEN_PATTERN = "^[A-Za-z0-9_=-]*$"  # noqa: S105 ``pagination.page_request``


def single_line_text(max_length: int, *, required: bool = True) -> JsonObject:
    """A one-line text member: trimmed by the server, no control character inside."""
    inner = f"{_LINE_CHAR}*{_VISIBLE}{_LINE_CHAR}*" if required else f"{_LINE_CHAR}*"
    schema: JsonObject = {
        "type": "string",
        "maxLength": max_length,
        "pattern": f"^{_EDGE}{inner}{_EDGE}$",
        "description": "one line; blanks at its edges are trimmed",
    }
    if required:
        schema["minLength"] = 1
    return schema


def multi_line_text(max_length: int) -> JsonObject:
    """A required text that may span lines (tab, LF and CR kept)."""
    return {
        "type": "string",
        "minLength": 1,
        "maxLength": max_length,
        "pattern": f"^{_TEXT_CHAR}*{_VISIBLE}{_TEXT_CHAR}*$",
    }


def path_id(description: str) -> JsonObject:
    return {
        "name": "id",
        "in": "path",
        "required": True,
        "description": description,
        "schema": {
            "type": "string",
            "minLength": 1,
            "maxLength": bounds.ID_MAX,
            "pattern": ID_PATTERN,
        },
    }


def query(name: str, schema: JsonObject, description: str) -> JsonObject:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": schema,
    }


# Actions (cancel, retry, read, dismiss) take no body: none at all, or ``{}``.
NO_BODY: JsonObject = json_body(
    {"type": "object", "maxProperties": 0, "additionalProperties": False},
    "optional; empty or {}",
    required=False,
)

PAGE_PARAMETERS: list[JsonObject] = [
    query(
        "page_size",
        {
            "type": "integer",
            "minimum": PAGE_SIZE_RANGE[0],
            "maximum": PAGE_SIZE_RANGE[1],
            "default": PAGE_SIZE_DEFAULT,
        },
        "items per page",
    ),
    query(
        "page_token",
        {"type": "string", "maxLength": PAGE_TOKEN_MAX, "pattern": PAGE_TOKEN_PATTERN},
        "opaque; the `next_page_token` of the previous page of the same list, with the same"
        " filters (any other is a 400: `invalid_argument`, or `page_token_mismatch` for a"
        " token of another list or another user's)",
    ),
]

USER_SECURITY: list[JsonObject] = [{"bearerAuth": []}, {"cookieAuth": []}]


def endpoint(
    summary: str,
    operation_id: str,
    tag: str,
    responses: JsonObject,
    *,
    parameters: Iterable[JsonObject] = (),
    request_body: JsonObject | None = None,
    secured: bool = True,
) -> JsonObject:
    """One OpenAPI operation object; API routes are secured and answer 401 by default, and
    409 to a page that was rendered for another user (``auth.check_page_user``); a route
    that takes a body answers 408 when it comes too slowly (``bodies``)."""
    operation: JsonObject = {
        "summary": summary,
        "operationId": operation_id,
        "tags": [tag],
        "responses": {
            **responses,
            **(errors(401, 409) if secured else {}),
            **(errors(408) if request_body is not None else {}),
        },
    }
    params = list(parameters)
    if params:
        operation["parameters"] = params
    if request_body is not None:
        operation["requestBody"] = request_body
    if secured:
        operation["security"] = USER_SECURITY
    else:
        operation["security"] = []
    return operation


def list_of(item: str) -> JsonObject:
    return {
        "type": "object",
        "required": ["items", "next_page_token"],
        "additionalProperties": False,
        "properties": {
            "items": {"type": "array", "items": ref(item)},
            "next_page_token": nullable({"type": "string"}),
        },
    }


_TIME: JsonObject = {
    "type": "string",
    "format": "date-time",
    "example": "2026-11-30T12:00:00.123456Z",
}
_OPTIONAL_TIME = nullable(_TIME)

SHARED_SCHEMAS: Mapping[str, JsonObject] = {
    "Problem": {
        "type": "object",
        "description": "RFC 9457 problem details with a stable `code`",
        "required": ["type", "title", "status", "detail", "code"],
        "properties": {
            "type": {"type": "string", "format": "uri"},
            "title": {"type": "string"},
            "status": {"type": "integer"},
            "detail": {"type": "string"},
            "code": {"type": "string", "description": "stable; branch on this"},
            "field": {"type": "string", "description": "the invalid argument (400 only)"},
            "operation_id": {
                "type": "string",
                "description": "the unfinished operation to cancel first (409 analysis_active)",
            },
        },
    },
    "Subject": {
        "type": "object",
        "description": "an opaque reference to what the operation works on",
        "required": ["type", "id"],
        "additionalProperties": False,
        "properties": {
            "type": {"type": "string", "maxLength": bounds.SUBJECT_TYPE_MAX},
            "id": {"type": "string", "maxLength": bounds.SUBJECT_ID_MAX},
        },
    },
    "Operation": {
        "type": "object",
        "required": [
            "id",
            "task_type",
            "state",
            "progress_percent",
            "attempt",
            "max_attempts",
            "cancel_requested",
            "subject",
            "status_url",
            "created_at",
            "updated_at",
            "started_at",
            "finished_at",
            "deadline_at",
            "next_attempt_at",
            "not_before",
            "usage",
        ],
        "additionalProperties": False,
        "properties": {
            "id": {"type": "string"},
            "task_type": {"type": "string", "maxLength": bounds.TASK_TYPE_MAX},
            "state": {"type": "string", "enum": list(STATE_NAMES)},
            "progress_percent": {
                "type": "integer",
                "minimum": bounds.PROGRESS_RANGE[0],
                "maximum": bounds.PROGRESS_RANGE[1],
            },
            "attempt": {"type": "integer", "minimum": 0},
            "max_attempts": {
                "type": "integer",
                "minimum": bounds.MAX_ATTEMPTS_RANGE[0],
                "maximum": bounds.MAX_ATTEMPTS_RANGE[1],
            },
            "cancel_requested": {"type": "boolean"},
            "subject": ref("Subject"),
            "status_url": {"type": "string"},
            "created_at": _TIME,
            "updated_at": _TIME,
            "started_at": _OPTIONAL_TIME,
            "finished_at": _OPTIONAL_TIME,
            "deadline_at": _OPTIONAL_TIME,
            "next_attempt_at": _OPTIONAL_TIME,
            "not_before": _OPTIONAL_TIME,  # a scheduled operation is not claimed before then
            "usage": nullable(ref("Usage")),  # the sums over its attempts; null before any
        },
    },
    "Usage": {
        "type": "object",
        "required": ["prompt_tokens", "completion_tokens", "model_seconds"],
        "additionalProperties": False,
        "properties": {
            "prompt_tokens": {"type": "integer", "minimum": 0},
            "completion_tokens": {"type": "integer", "minimum": 0},
            "model_seconds": {"type": "number", "minimum": 0},  # the model's own time
        },
    },
    "Provenance": {
        "type": "object",
        "required": ["model", "route"],
        "additionalProperties": False,
        "properties": {
            "model": {"type": "string", "maxLength": bounds.MODEL_MAX},
            "route": {"type": "string", "enum": ["local", "external", ""]},
        },
    },
    "OperationList": list_of("Operation"),
}

SECURITY_SCHEMES: JsonObject = {
    "bearerAuth": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT (HS256)"},
    "cookieAuth": {"type": "apiKey", "in": "cookie", "name": "ops_session"},
    # The operator console's session (gateway.console): never an owner's credential.
    "consoleAuth": {"type": "apiKey", "in": "cookie", "name": "ops_console"},
}


def build_document(modules: Iterable[RouteModule], *, version: str = "1") -> JsonObject:
    paths: dict[str, JsonObject] = {}
    schemas: dict[str, JsonObject] = dict(SHARED_SCHEMAS)
    for module in modules:
        for path, item in module.openapi_paths.items():
            merged = paths.setdefault(path, {})
            for method, operation in item.items():
                if method in merged:
                    raise ValueError(f"OpenAPI declares {method.upper()} {path} twice")
                merged[method] = operation
        for name, schema in module.openapi_schemas.items():
            if name in schemas and schemas[name] != schema:
                raise ValueError(f"OpenAPI schema {name} declared twice")
            schemas[name] = schema
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "durable-ops gateway",
            "version": version,
            "description": "Owner-scoped durable operations and notifications. "
            "Errors are application/problem+json (RFC 9457) with a stable `code`. "
            "A request whose `Host` is not one of the gateway's names "
            "(OPS_GATEWAY_ALLOWED_HOSTS) is refused before routing: 400 `host_not_allowed`; "
            f"the probes {_PROBES} answer under any name. "
            "The web UI's pages send `X-Ops-Page-User: <user id>`, the user the page was "
            "rendered for (the event stream takes it as `page_user`): a signed-in route "
            "answers one that names another user than the credential's with 409 "
            "`page_user_changed` and does nothing. Without it nothing is compared.",
        },
        "paths": dict(sorted(paths.items())),
        "components": {"schemas": schemas, "securitySchemes": SECURITY_SCHEMES},
    }


async def _openapi(request: Request) -> Response:
    return JSONResponse(request.app.state.openapi)


routes: Sequence[BaseRoute] = [Route("/openapi.json", _openapi, methods=["GET"])]
openapi_paths: Mapping[str, Mapping[str, Any]] = {
    "/openapi.json": {
        "get": endpoint(
            "This document",
            "getOpenApi",
            "meta",
            {"200": ok("OpenAPI 3.1 document", {"type": "object"})},
            secured=False,
        )
    }
}
openapi_schemas: Mapping[str, Any] = {}
