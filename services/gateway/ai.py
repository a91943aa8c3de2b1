"""AI analyses: start one (through AI admission) and read its cached result.

``POST /api/jobs/{id}/strategy-snapshot`` and ``POST /api/attachments/{id}/cv-review``
ask admission for an operation and answer 202 with its status URL. The GET
twins are cache-only: they read the published note and the newest operation
for the subject and never start work or reach a model.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from durable_ops.api.ai_admission.v1 import ai_admission_pb2 as admission_pb
from durable_ops.api.ai_admission.v1 import ai_admission_pb2_grpc as admission_grpc
from durable_ops.api.workspace.v1 import workspace_pb2 as workspace_pb
from durable_ops.api.workspace.v1 import workspace_pb2_grpc as workspace_grpc
from durable_ops.gateway import dto
from durable_ops.gateway.bodies import json_object, string_field
from durable_ops.gateway.calls import OwnerCalls, owner_calls
from durable_ops.gateway.ids import ID_MAX, resource_id
from durable_ops.gateway.openapi import endpoint, errors, json_body, nullable, ok, path_id, ref
from durable_ops.gateway.problems import invalid
from durable_ops.model import bounds
from durable_ops.model.errors import InvalidArgument, NotFound

IDEMPOTENCY_HEADER = "idempotency-key"


@dataclass(frozen=True)
class Analysis:
    """One AI task as the HTTP API offers it."""

    task_type: str
    subject_path: str  # "jobs" or "attachments"
    subject_type: str
    context_field: str  # the optional second reference in the POST body
    not_found: Callable[[], NotFound]

    async def check_subject(self, calls: OwnerCalls, subject_id: str) -> None:
        stub = calls.stub("workspace", workspace_grpc.WorkspaceServiceStub)
        if self.subject_type == "job":
            await calls(stub.GetJob, workspace_pb.GetJobRequest(job_id=subject_id))
        else:
            request = workspace_pb.GetAttachmentRequest(attachment_id=subject_id)
            await calls(stub.GetAttachment, request)


STRATEGY_SNAPSHOT = Analysis(
    "strategy.snapshot",
    "jobs",
    "job",
    "attachment_id",
    lambda: NotFound("job not found", code="job_not_found"),
)
CV_REVIEW = Analysis(
    "cv.review",
    "attachments",
    "attachment",
    "job_id",
    lambda: NotFound("attachment not found", code="attachment_not_found"),
)


def _idempotency_key(request: Request) -> str:
    key = request.headers.get(IDEMPOTENCY_HEADER, "")
    if key:
        try:
            bounds.idempotency_key(key)
        except InvalidArgument as exc:
            raise invalid(
                "Idempotency-Key", exc.message.removeprefix("idempotency_key: ")
            ) from None
    return key


def _admission(calls: OwnerCalls) -> Any:
    return calls.stub("ai_admission", admission_grpc.AiAdmissionServiceStub)


def start(analysis: Analysis) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint_(request: Request) -> Response:
        calls = owner_calls(request)
        subject_id = resource_id(request, analysis.not_found)
        key = _idempotency_key(request)
        body = await json_object(request, (analysis.context_field,), optional=True)
        context_ref = (
            string_field(body, analysis.context_field, max_length=ID_MAX, required=False) or ""
        )
        reply = await calls(
            _admission(calls).Admit,
            admission_pb.AdmitRequest(
                task_type=analysis.task_type,
                subject_id=subject_id,
                context_ref=context_ref,
                idempotency_key=key,
            ),
        )
        return JSONResponse(
            {"operation_id": reply.operation.id, "status_url": reply.status_url},
            status_code=202,
            headers={"Location": reply.status_url},
        )

    return endpoint_


def cached(analysis: Analysis) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint_(request: Request) -> Response:
        calls = owner_calls(request)
        subject_id = resource_id(request, analysis.not_found)
        await analysis.check_subject(calls, subject_id)
        workspace = calls.stub("workspace", workspace_grpc.WorkspaceServiceStub)
        try:
            note = await calls(
                workspace.GetNote,
                workspace_pb.GetNoteRequest(
                    kind=analysis.task_type,
                    subject_type=analysis.subject_type,
                    subject_id=subject_id,
                ),
            )
            snapshot: dict[str, Any] | None = {
                "result": json.loads(note.body_json),
                "operation_id": note.operation_id or None,
                "updated_at": dto.time_or_none(note, "updated_at"),
            }
        except NotFound:
            snapshot = None
        lookup = await calls(
            _admission(calls).Lookup,
            admission_pb.LookupRequest(task_type=analysis.task_type, subject_id=subject_id),
        )
        operation = dto.operation(lookup.operation) if lookup.HasField("operation") else None
        return JSONResponse({"snapshot": snapshot, "operation": operation})

    return endpoint_


ANALYSES = (STRATEGY_SNAPSHOT, CV_REVIEW)


def _path(analysis: Analysis) -> str:
    return f"/api/{analysis.subject_path}/{{id}}/{analysis.task_type.replace('.', '-')}"


routes: Sequence[BaseRoute] = [
    route
    for analysis in ANALYSES
    for route in (
        Route(_path(analysis), start(analysis), methods=["POST"]),
        Route(_path(analysis), cached(analysis), methods=["GET"]),
    )
]

openapi_schemas: Mapping[str, Any] = {
    "Accepted": {
        "type": "object",
        "required": ["operation_id", "status_url"],
        "additionalProperties": False,
        "properties": {"operation_id": {"type": "string"}, "status_url": {"type": "string"}},
    },
    "AnalysisResult": {
        "type": "object",
        "required": ["snapshot", "operation"],
        "additionalProperties": False,
        "properties": {
            "snapshot": nullable(
                {
                    "type": "object",
                    "required": ["result", "operation_id", "updated_at"],
                    "properties": {
                        "result": {"type": "object", "description": "the validated model answer"},
                        "operation_id": nullable({"type": "string"}),
                        "updated_at": {"type": "string", "format": "date-time"},
                    },
                }
            ),
            "operation": nullable(ref("Operation")),
        },
    },
}

_IDEMPOTENCY_PARAMETER = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "schema": {"type": "string", "maxLength": bounds.IDEMPOTENCY_KEY_MAX},
    "description": "repeats with the same key return the same operation",
}


def _openapi(analysis: Analysis) -> dict[str, Any]:
    name = analysis.task_type
    subject = path_id(f"{analysis.subject_type} id")
    return {
        "post": endpoint(
            f"Start a {name} (202 with the status URL; an active one is reused)",
            f"start_{name.replace('.', '_')}",
            "ai",
            {
                "202": {
                    "description": "admitted",
                    "headers": {"Location": {"schema": {"type": "string"}}},
                    "content": {"application/json": {"schema": ref("Accepted")}},
                },
                **errors(400, 403, 404, 409, 413, 415, 429, 503, 504),
            },
            parameters=[subject, _IDEMPOTENCY_PARAMETER],
            request_body=json_body(
                {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {analysis.context_field: {"type": "string"}},
                },
                f"optional {analysis.context_field}",
                required=False,
            ),
        ),
        "get": endpoint(
            f"The cached {name} and its newest operation; never starts work",
            f"get_{name.replace('.', '_')}",
            "ai",
            {"200": ok("the cache", ref("AnalysisResult")), **errors(404, 503, 504)},
            parameters=[subject],
        ),
    }


openapi_paths: Mapping[str, Mapping[str, Any]] = {
    _path(analysis): _openapi(analysis) for analysis in ANALYSES
}
