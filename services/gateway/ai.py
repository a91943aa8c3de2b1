"""AI analyses: start one (through AI admission) and read its cached result.

One resource per registered task type (``model.tasks``), at ``task.path``:
``POST /api/jobs/{id}/strategy-snapshot`` asks admission for an operation and
answers 202 with its status URL, whether it was ``reused`` (the subject's active
analysis, or the one the same Idempotency-Key made) and the later time it waits for
(``not_before``, null when it is due now), so a page can say "already scheduled
for …" to a start that named another time (ADR 0058). The GET twin is cache-only: it reads the
newest published result and the newest operation for the subject and never starts
work or reaches a model. Each finished analysis is its own result (issue 39, point 4):
``GET /api/operations/{id}/result`` reads the one a past operation published.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from durable_ops.api.ai_admission.v1 import ai_admission_pb2 as admission_pb
from durable_ops.api.ai_admission.v1 import ai_admission_pb2_grpc as admission_grpc
from durable_ops.api.operations.v1 import operations_pb2 as operations_pb
from durable_ops.api.operations.v1 import operations_pb2_grpc as operations_grpc
from durable_ops.api.workspace.v1 import workspace_pb2 as workspace_pb
from durable_ops.api.workspace.v1 import workspace_pb2_grpc as workspace_grpc
from durable_ops.gateway import dto
from durable_ops.gateway.bodies import json_object, string_field
from durable_ops.gateway.calls import OwnerCalls, owner_calls, stub_for
from durable_ops.gateway.ids import resource_id
from durable_ops.gateway.modules import RouteSet
from durable_ops.gateway.openapi import (
    ID_PATTERN,
    endpoint,
    errors,
    json_body,
    nullable,
    ok,
    path_id,
    query,
    ref,
    single_line_text,
)
from durable_ops.gateway.pagination import query_params
from durable_ops.gateway.partial import fields_so_far
from durable_ops.gateway.problems import invalid, one_header
from durable_ops.model import bounds, lifecycle
from durable_ops.model.bounds import ID_MAX
from durable_ops.model.errors import InvalidArgument, NotFound
from durable_ops.model.states import OperationState
from durable_ops.model.subjects import SubjectKind
from durable_ops.model.tasks import TASKS, Registry, TaskType
from durable_ops.rpc.subjects import read_method, read_request

IDEMPOTENCY_HEADER = "Idempotency-Key"
_ID = re.compile(ID_PATTERN.strip("^$"))


_workspace = stub_for("workspace", workspace_grpc.WorkspaceServiceStub)


async def read_subject(calls: OwnerCalls, kind: SubjectKind, subject_id: str) -> None:
    """The Workspace read that proves a subject is the caller's own (NOT_FOUND otherwise)."""
    workspace = _workspace(calls)
    await calls(read_method(workspace, kind), read_request(kind, subject_id))


def _not_found(kind: SubjectKind) -> Callable[[], NotFound]:
    return lambda: NotFound(f"{kind.name} not found", code=f"{kind.name}_not_found")


def _idempotency_key(request: Request) -> str:
    """The header's key; "" when none was sent (an empty one is refused, not read as none)."""
    key = one_header(request, IDEMPOTENCY_HEADER)
    if key is None:
        return ""
    if not key:
        raise invalid("Idempotency-Key", "must not be empty: send a key, or no header")
    # A header is bytes, read as latin-1: UTF-8's "ключ" holds a byte that reads as the C1
    # control U+008E, which the key never had. Any byte outside printable ASCII (tab, a
    # control, anything past ~) gets this one answer, never a character it may not be.
    if not re.fullmatch(bounds.KEY_PATTERN, key):
        raise invalid("Idempotency-Key", "must be printable ASCII without spaces")
    try:
        return bounds.idempotency_key(key)
    except InvalidArgument as exc:
        raise invalid("Idempotency-Key", exc.reason, code=exc.code) from None


_admission = stub_for("ai_admission", admission_grpc.AiAdmissionServiceStub)


def start(task: TaskType) -> Callable[[Request], Awaitable[Response]]:
    context_fields = (task.context.reference_field,) if task.context else ()

    async def endpoint_(request: Request) -> Response:
        calls = await owner_calls(request)
        subject_id = resource_id(request, _not_found(task.subject))
        key = _idempotency_key(request)
        body = await json_object(request, (*context_fields, NOT_BEFORE), optional=True)
        context_ref = ""
        if task.context is not None:
            field = task.context.reference_field
            context_ref = string_field(body, field, max_length=ID_MAX, required=False) or ""
        admit = admission_pb.AdmitRequest(
            task_type=task.name,
            subject_id=subject_id,
            context_ref=context_ref,
            idempotency_key=key,
        )
        not_before = _not_before(body)
        if not_before is not None:
            admit.not_before.FromDatetime(not_before)
        reply = await calls(_admission(calls).Admit, admit)
        return JSONResponse(
            {
                "operation_id": reply.operation.id,
                "status_url": reply.status_url,
                "reused": reply.reused,
                NOT_BEFORE: dto.time_or_none(reply, NOT_BEFORE),
            },
            status_code=202,
            headers={"Location": reply.status_url, **look_again_headers(reply.operation)},
        )

    return endpoint_


def look_again_headers(operation: operations_pb.Operation) -> dict[str, str]:
    """``Retry-After``, when the status may have moved (``lifecycle.look_again_after``):
    within moments for an analysis due now (a worker takes it), not before its time for a
    scheduled one, and none for one that has ended (a reused, finished analysis): its
    status is final. Also the header of ``GET /api/operations/{id}`` and its ``:wait``."""
    seconds = lifecycle.look_again_after(
        OperationState(dto.state_name(operation.state)),
        not_before=_time_or_none(operation.HasField("not_before"), operation.not_before),
        next_attempt_at=_time_or_none(
            operation.HasField("next_attempt_at"), operation.next_attempt_at
        ),
        deadline_at=_time_or_none(operation.HasField("deadline_at"), operation.deadline_at),
        now=datetime.now(UTC),
    )
    return {} if seconds is None else {"Retry-After": str(seconds)}


def _time_or_none(present: bool, stamp: Timestamp) -> datetime | None:
    return stamp.ToDatetime(tzinfo=UTC) if present else None


NOT_BEFORE = "not_before"


def _not_before(body: dict[str, Any]) -> datetime | None:
    """The optional schedule of a start (ADR 0046): an RFC 3339 time with its offset."""
    text = string_field(body, NOT_BEFORE, max_length=64, required=False)
    if text is None:
        return None
    try:
        return dto.parse_rfc3339(text)
    except ValueError:
        raise invalid(
            NOT_BEFORE, "must be an RFC 3339 time with its offset, e.g. 2026-12-24T09:00:00Z"
        ) from None


def _check_reference(name: str, value: str) -> None:
    """A context reference in a query string: empty, or shaped like an id (400 otherwise)."""
    if value and (len(value) > ID_MAX or not _ID.fullmatch(value)):
        raise invalid(name, f"must be an id: at most {ID_MAX} of A-Z, a-z, 0-9, '_' and '-'")


def cached(task: TaskType) -> Callable[[Request], Awaitable[Response]]:
    context_fields = (task.context.reference_field,) if task.context else ()

    async def endpoint_(request: Request) -> Response:
        calls = await owner_calls(request)
        subject_id = resource_id(request, _not_found(task.subject))
        # Read strictly, like every query string: a misspelt parameter is a 400. The context
        # reference is accepted (a client may send back what it started with) and checked,
        # but the answer is the subject's newest result, whatever its second reference
        # (each result names its own).
        for name, value in query_params(request, context_fields).items():
            _check_reference(name, value)
        await read_subject(calls, task.subject, subject_id)
        # The operation first, then the note: a worker publishes its note before it
        # completes (with the lease), so an operation read as succeeded always finds its
        # note. The other order can read "no note yet", then "succeeded", if the worker
        # finishes between the two reads: a finished analysis without its result.
        lookup = await calls(
            _admission(calls).Lookup,
            admission_pb.LookupRequest(task_type=task.name, subject_id=subject_id),
        )
        operation = dto.operation(lookup.operation) if lookup.HasField("operation") else None
        try:
            note = await calls(
                _workspace(calls).GetNote,
                workspace_pb.GetNoteRequest(
                    kind=task.name,
                    subject_type=task.subject.name,
                    subject_id=subject_id,
                ),
            )
            snapshot: dict[str, Any] | None = _result(note, task)
        except NotFound:
            snapshot = None
        draft = None
        if operation is not None and operation["state"] == "running":
            draft = await _draft(calls, lookup.operation.id)
        return JSONResponse({"snapshot": snapshot, "operation": operation, "draft": draft})

    return endpoint_


def _result(note: workspace_pb.AiWorkspaceNote, task: TaskType | None) -> dict[str, Any]:
    """One published result: the answer, when it was made, and with what (its second
    reference, by the name it had then, and its model)."""
    context = task.context if task is not None else None
    return {
        "result": json.loads(note.body_json),
        "operation_id": note.operation_id or None,
        "created_at": dto.time_or_none(note, "created_at"),
        "updated_at": dto.time_or_none(note, "updated_at"),
        "context": (
            {"type": context.name, "id": note.context_ref, "name": note.context_name or None}
            if context is not None and note.context_ref
            else None
        ),
        "provenance": {"model": note.model, "route": note.route} if note.model else None,
    }


def _no_result() -> NotFound:
    return NotFound("this operation has no result", code="result_not_found")


def operation_result(registry: Registry) -> Callable[[Request], Awaitable[Response]]:
    """``GET /api/operations/{id}/result``: the result that operation published ("View
    result" on a past run opens its own, not the newest). 404 ``result_not_found`` for an
    id that names none of the caller's results."""

    async def endpoint_(request: Request) -> Response:
        calls = await owner_calls(request)
        operation_id = resource_id(request, _no_result)
        note = await calls(
            _workspace(calls).GetOperationNote,
            workspace_pb.GetOperationNoteRequest(operation_id=operation_id),
        )
        task = registry.get(note.kind) if note.kind in registry else None
        subject = {"type": note.subject_type, "id": note.subject_id}
        return JSONResponse({**_result(note, task), "task_type": note.kind, "subject": subject})

    return endpoint_


async def _draft(calls: OwnerCalls, operation_id: str) -> dict[str, Any] | None:
    """The running attempt's answer so far, as the fields present yet; None before any."""
    try:
        draft = await calls(
            _operations(calls).GetAnswerDraft,
            operations_pb.GetAnswerDraftRequest(operation_id=operation_id),
        )
    except NotFound:
        return None
    return {
        "attempt": draft.attempt,
        "partial": fields_so_far(draft.text),
        "updated_at": dto.time_or_none(draft, "updated_at"),
    }


_operations = stub_for("operations", operations_grpc.OperationsServiceStub)

_SNAPSHOT_PROPERTIES: Mapping[str, Any] = {
    "result": {"type": "object", "description": "the validated model answer"},
    "operation_id": nullable({"type": "string"}),
    "created_at": {"type": "string", "format": "date-time"},
    "updated_at": {"type": "string", "format": "date-time"},
    "context": nullable(
        {
            "type": "object",
            "description": "the run's second reference (e.g. the CV), named as it was then",
            "required": ["type", "id", "name"],
            "properties": {
                "type": {"type": "string"},
                "id": {"type": "string"},
                "name": nullable({"type": "string"}),
            },
        }
    ),
    "provenance": nullable(ref("Provenance")),
}

_SCHEMAS: Mapping[str, Any] = {
    "AnalysisSnapshot": {
        "type": "object",
        "description": "one published result (each finished analysis is its own)",
        "required": list(_SNAPSHOT_PROPERTIES),
        "additionalProperties": False,
        "properties": _SNAPSHOT_PROPERTIES,
    },
    "OperationResult": {
        "type": "object",
        "required": [*_SNAPSHOT_PROPERTIES, "task_type", "subject"],
        "additionalProperties": False,
        "properties": {
            **_SNAPSHOT_PROPERTIES,
            "task_type": {"type": "string"},
            "subject": ref("Subject"),
        },
    },
    "Accepted": {
        "type": "object",
        "required": ["operation_id", "status_url", "reused", NOT_BEFORE],
        "additionalProperties": False,
        "properties": {
            "operation_id": {"type": "string"},
            "status_url": {"type": "string"},
            "reused": {
                "type": "boolean",
                "description": "the subject's active analysis (or the key's) was returned",
            },
            NOT_BEFORE: nullable(
                {
                    "type": "string",
                    "format": "date-time",
                    "description": "the later time it waits for; null: it is due now",
                }
            ),
        },
    },
    "AnalysisResult": {
        "type": "object",
        "required": ["snapshot", "operation", "draft"],
        "additionalProperties": False,
        "properties": {
            "draft": nullable(
                {
                    "type": "object",
                    "description": "while an attempt runs: its answer so far (issue 39)",
                    "required": ["attempt", "partial", "updated_at"],
                    "properties": {
                        "attempt": {"type": "integer"},
                        "partial": nullable(
                            {"type": "object", "description": "the answer's fields so far"}
                        ),
                        "updated_at": {"type": "string", "format": "date-time"},
                    },
                }
            ),
            "snapshot": nullable(ref("AnalysisSnapshot")),
            "operation": nullable(ref("Operation")),
        },
    },
}

_IDEMPOTENCY_PARAMETER = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    # ``bounds.idempotency_key``: printable ASCII without spaces; sent empty, it is refused.
    "schema": {
        "type": "string",
        "minLength": 1,
        "maxLength": bounds.IDEMPOTENCY_KEY_MAX,
        "pattern": bounds.KEY_PATTERN,
    },
    "description": "repeats with the same key return the same operation",
}


def _context_parameters(task: TaskType) -> list[dict[str, Any]]:
    """The GET's one optional query parameter: the context reference, as the POST takes it."""
    if task.context is None:
        return []
    schema = {"type": "string", "maxLength": ID_MAX, "pattern": ID_PATTERN.replace("+", "*")}
    return [
        query(
            task.context.reference_field,
            schema,
            f"optional {task.context.name} id, as sent to the POST; checked, but the answer is"
            " the subject's newest result whatever its second reference (each names its own)",
        )
    ]


def _start_body(context: dict[str, Any]) -> dict[str, Any]:
    properties = {
        **context,
        # Not before then (≤ 30 days ahead, else 400 not_before_too_far); the time budget
        # counts from it.
        NOT_BEFORE: {"type": "string", "format": "date-time"},
    }
    body: dict[str, Any] = {
        "type": "object",
        "additionalProperties": False,
        "properties": properties,
    }
    if context:
        # What ``start`` checks of the member (``string_field``): one line, an id's length at
        # most. An id that is not the caller's is admission's 404.
        checked = {field: single_line_text(ID_MAX, required=False) for field in context}
        body["allOf"] = [{"properties": checked}]
    return body


def _openapi(task: TaskType) -> dict[str, Any]:
    name = task.name
    subject = path_id(f"{task.subject.name} id")
    context = {task.context.reference_field: {"type": "string"}} if task.context else {}
    return {
        "post": endpoint(
            f"Start a {name} (202 with the status URL; an active one is reused)",
            f"start_{name.replace('.', '_')}",
            "ai",
            {
                "202": {
                    "description": "admitted",
                    "headers": {
                        "Location": {"schema": {"type": "string"}},
                        "Retry-After": {
                            "description": "seconds until the status may have moved: 1 for"
                            " an analysis due now, until its not_before for a scheduled one;"
                            " absent when the reused analysis has already ended",
                            "schema": {"type": "integer", "minimum": 1},
                        },
                    },
                    "content": {"application/json": {"schema": ref("Accepted")}},
                },
                **errors(400, 403, 404, 409, 413, 415, 429, 503, 504),
            },
            parameters=[subject, _IDEMPOTENCY_PARAMETER],
            request_body=json_body(
                _start_body(context),
                f"optional {', '.join([*context, NOT_BEFORE])}; the subject's active"
                f" analysis is reused at its own {NOT_BEFORE}, which the answer gives",
                required=False,
            ),
        ),
        "get": endpoint(
            f"The cached {name} and its newest operation; never starts work",
            f"get_{name.replace('.', '_')}",
            "ai",
            {"200": ok("the cache", ref("AnalysisResult")), **errors(400, 404, 503, 504)},
            parameters=[subject, *_context_parameters(task)],
        ),
    }


RESULT_PATH = "/api/operations/{id}/result"
_RESULT_OPENAPI = {
    "get": endpoint(
        "The result an operation published (each finished analysis is its own)",
        "get_operation_result",
        "ai",
        {"200": ok("its result", ref("OperationResult")), **errors(404, 503, 504)},
        parameters=[path_id("operation id")],
    )
}


def analysis_module(registry: Registry) -> RouteSet:
    """POST (start) and GET (cached result) for every task type of ``registry``."""
    routes = [
        route
        for task in registry
        for route in (
            Route(task.path, start(task), methods=["POST"]),
            Route(task.path, cached(task), methods=["GET"]),
        )
    ]
    paths = {task.path: _openapi(task) for task in registry}
    return RouteSet(routes, paths, _SCHEMAS)


# The product's task types, and the one result route of a past operation (mounted once:
# a module of further task types adds its own start and cache routes only).
_DEFAULT = analysis_module(TASKS)
routes: Sequence[BaseRoute] = [
    *_DEFAULT.routes,
    Route(RESULT_PATH, operation_result(TASKS), methods=["GET"]),
]
openapi_paths: Mapping[str, Mapping[str, Any]] = {
    **_DEFAULT.openapi_paths,
    RESULT_PATH: _RESULT_OPENAPI,
}
openapi_schemas: Mapping[str, Any] = _DEFAULT.openapi_schemas
