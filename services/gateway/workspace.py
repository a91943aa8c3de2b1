"""``/api/jobs``, ``/api/attachments`` and ``/api/settings/ai``: the caller's workspace.

A job or CV is deleted with ``DELETE`` (204): what was made from it goes too, and its share
of the storage quota comes back; 409 ``analysis_active`` names, in ``operation_id``, the
unfinished analysis to cancel first (ADR 60).

A page of ``GET /api/jobs`` or ``GET /api/attachments`` carries an ``ETag`` (a hash of the
page as sent): asked again with ``If-None-Match`` naming it, an unchanged page is a 304
without a body. The page is still read from the workspace service each time; what is saved
is sending it (a job's description is up to 20,000 characters), and the reader's work on it
(the web UI reads both lists again whenever a tab is shown again).
``Cache-Control: no-store`` stays: the reader keeps its copy, no browser cache does.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from datetime import UTC
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.staticfiles import NotModifiedResponse

from durable_ops.api.workspace.v1 import workspace_pb2 as pb
from durable_ops.api.workspace.v1 import workspace_pb2_grpc as pb_grpc
from durable_ops.gateway import dto
from durable_ops.gateway.bodies import bool_field, json_object, string_field
from durable_ops.gateway.calls import owner_calls, stub_for
from durable_ops.gateway.ids import resource_id
from durable_ops.gateway.openapi import (
    PAGE_PARAMETERS,
    endpoint,
    errors,
    json_body,
    list_of,
    multi_line_text,
    ok,
    path_id,
    ref,
    single_line_text,
)
from durable_ops.gateway.pagination import PAGING_PARAMETERS, list_body, page_request, query_params
from durable_ops.gateway.problems import invalid
from durable_ops.model.bounds import (
    ATTACHMENT_FILENAME_MAX,
    ATTACHMENT_TEXT_MAX,
    JOB_COMPANY_MAX,
    JOB_DESCRIPTION_MAX,
    JOB_TITLE_MAX,
)
from durable_ops.model.errors import NotFound

BACKEND = "workspace"
# A CV of 200,000 characters is up to 800 kB of UTF-8, plus JSON escaping.
ATTACHMENT_BODY_MAX_BYTES = 2 * 1024 * 1024
JOB_BODY_MAX_BYTES = 256 * 1024
PRIVACY_CHOICES = ("local_only", "external_allowed")


_stub = stub_for(BACKEND, pb_grpc.WorkspaceServiceStub)


def _job_not_found() -> NotFound:
    return NotFound("job not found", code="job_not_found")


def _attachment_not_found() -> NotFound:
    return NotFound("attachment not found", code="attachment_not_found")


def job_dto(job: pb.Job) -> dict[str, Any]:
    return {
        "id": job.id,
        "title": job.title,
        "company": job.company,
        "description": job.description,
        "created_at": dto.time_or_none(job, "created_at"),
        "updated_at": dto.time_or_none(job, "updated_at"),
    }


def attachment_dto(attachment: pb.Attachment, *, with_text: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": attachment.id,
        "kind": attachment.kind,
        "filename": attachment.filename,
        "text_length": attachment.text_length,
        "created_at": dto.time_or_none(attachment, "created_at"),
    }
    if with_text:
        body["text"] = attachment.text
    return body


def settings_dto(settings: pb.AiSettings) -> dict[str, Any]:
    budget = settings.budget
    return {
        "ai_enabled": settings.ai_enabled,
        "privacy": settings.privacy,
        "plan": settings.plan,
        "budget": {
            "limit": budget.limit,
            "spent": budget.spent,
            "reserved": budget.reserved,
            "renews_at": dto.rfc3339(budget.renews_at.ToDatetime(tzinfo=UTC)),
        },
    }


def _created(body: dict[str, Any], location: str) -> Response:
    return JSONResponse(body, status_code=201, headers={"Location": location})


def _none_match(if_none_match: str, etag: str) -> bool:
    """Whether ``If-None-Match`` names ``etag`` (``*``, or one of a list; RFC 9110 13.1.2
    compares weakly: ``W/"x"`` names ``"x"``)."""
    if if_none_match.strip() == "*":
        return True
    return etag in (tag.strip().removeprefix("W/") for tag in if_none_match.split(","))


def _validated(request: Request, response: JSONResponse) -> Response:
    """``response`` with an ``ETag`` of its body; a 304 with no body instead when the
    request's ``If-None-Match`` names that tag (the reader has these very bytes). The tag is
    strong: a hash of the bytes, equal tags for equal bodies."""
    etag = '"' + hashlib.sha256(response.body).hexdigest()[:32] + '"'
    response.headers["ETag"] = etag
    if_none_match = request.headers.get("if-none-match")
    if if_none_match is not None and _none_match(if_none_match, etag):
        return NotModifiedResponse(response.headers)
    return response


# ---- jobs -----------------------------------------------------------------------------------


async def create_job(request: Request) -> Response:
    calls = await owner_calls(request)
    body = await json_object(
        request, ("title", "company", "description"), max_bytes=JOB_BODY_MAX_BYTES
    )
    description = string_field(body, "description", max_length=JOB_DESCRIPTION_MAX, multi_line=True)
    message = pb.CreateJobRequest(
        title=string_field(body, "title", max_length=JOB_TITLE_MAX) or "",
        company=string_field(body, "company", max_length=JOB_COMPANY_MAX, required=False) or "",
        description=description or "",
    )
    job = await calls(_stub(calls).CreateJob, message)
    return _created(job_dto(job), f"/api/jobs/{job.id}")


async def list_jobs(request: Request) -> Response:
    calls = await owner_calls(request)
    page = page_request(query_params(request, PAGING_PARAMETERS))
    reply = await calls(
        _stub(calls).ListJobs, pb.ListRequest(page_size=page.size, page_token=page.token)
    )
    jobs = [job_dto(job) for job in reply.jobs]
    return _validated(request, JSONResponse(list_body(jobs, reply.next_page_token)))


async def get_job(request: Request) -> Response:
    calls = await owner_calls(request)
    job_id = resource_id(request, _job_not_found)
    job = await calls(_stub(calls).GetJob, pb.GetJobRequest(job_id=job_id))
    return JSONResponse(job_dto(job))


async def delete_job(request: Request) -> Response:
    calls = await owner_calls(request)
    job_id = resource_id(request, _job_not_found)
    await calls(_stub(calls).DeleteJob, pb.DeleteJobRequest(job_id=job_id))
    return Response(status_code=204)


# ---- attachments ------------------------------------------------------------------------------


async def create_attachment(request: Request) -> Response:
    calls = await owner_calls(request)
    body = await json_object(
        request, ("kind", "filename", "text"), max_bytes=ATTACHMENT_BODY_MAX_BYTES
    )
    kind = string_field(body, "kind", max_length=16)
    if kind != "cv":
        raise invalid("kind", 'must be "cv"')
    message = pb.CreateAttachmentRequest(
        kind=kind,
        filename=string_field(body, "filename", max_length=ATTACHMENT_FILENAME_MAX) or "",
        text=string_field(body, "text", max_length=ATTACHMENT_TEXT_MAX, multi_line=True) or "",
    )
    attachment = await calls(_stub(calls).CreateAttachment, message)
    return _created(
        attachment_dto(attachment, with_text=False), f"/api/attachments/{attachment.id}"
    )


async def list_attachments(request: Request) -> Response:
    calls = await owner_calls(request)
    page = page_request(query_params(request, PAGING_PARAMETERS))
    reply = await calls(
        _stub(calls).ListAttachments, pb.ListRequest(page_size=page.size, page_token=page.token)
    )
    items = [attachment_dto(item, with_text=False) for item in reply.attachments]
    return _validated(request, JSONResponse(list_body(items, reply.next_page_token)))


async def get_attachment(request: Request) -> Response:
    calls = await owner_calls(request)
    attachment_id = resource_id(request, _attachment_not_found)
    attachment = await calls(
        _stub(calls).GetAttachment, pb.GetAttachmentRequest(attachment_id=attachment_id)
    )
    return JSONResponse(attachment_dto(attachment, with_text=True))


async def delete_attachment(request: Request) -> Response:
    calls = await owner_calls(request)
    attachment_id = resource_id(request, _attachment_not_found)
    message = pb.DeleteAttachmentRequest(attachment_id=attachment_id)
    await calls(_stub(calls).DeleteAttachment, message)
    return Response(status_code=204)


# ---- AI settings --------------------------------------------------------------------------------


async def get_ai_settings(request: Request) -> Response:
    calls = await owner_calls(request)
    settings = await calls(_stub(calls).GetAiSettings, pb.GetAiSettingsRequest())
    return JSONResponse(settings_dto(settings))


async def put_ai_settings(request: Request) -> Response:
    calls = await owner_calls(request)
    body = await json_object(request, ("ai_enabled", "privacy", "plan"))
    if "plan" in body:
        raise invalid(
            "plan", "is read-only here; an operator sets it with `opsctl users set-plan USER PLAN`"
        )
    message = pb.UpdateAiSettingsRequest()
    enabled = bool_field(body, "ai_enabled", required=False)
    if enabled is not None:
        message.ai_enabled = enabled
    privacy = string_field(body, "privacy", max_length=32, required=False)
    if privacy is not None:
        if privacy not in PRIVACY_CHOICES:
            raise invalid("privacy", "must be local_only or external_allowed")
        message.privacy = privacy
    settings = await calls(_stub(calls).UpdateAiSettings, message)
    return JSONResponse(settings_dto(settings))


routes: Sequence[BaseRoute] = [
    Route("/api/jobs", create_job, methods=["POST"]),
    Route("/api/jobs", list_jobs, methods=["GET"]),
    Route("/api/jobs/{id}", get_job, methods=["GET"]),
    Route("/api/jobs/{id}", delete_job, methods=["DELETE"]),
    Route("/api/attachments", create_attachment, methods=["POST"]),
    Route("/api/attachments", list_attachments, methods=["GET"]),
    Route("/api/attachments/{id}", get_attachment, methods=["GET"]),
    Route("/api/attachments/{id}", delete_attachment, methods=["DELETE"]),
    Route("/api/settings/ai", get_ai_settings, methods=["GET"]),
    Route("/api/settings/ai", put_ai_settings, methods=["PUT"]),
]

_TIME = {"type": "string", "format": "date-time"}
_WRITE_ERRORS = errors(400, 403, 413, 415, 503, 504)
# A job or a CV more than the owner may store is 429 ``storage_quota_exceeded``.
_CREATE_ERRORS = errors(400, 403, 413, 415, 429, 503, 504)
# 403: a cookie's change from another origin; 409 ``analysis_active``.
_DELETE_ERRORS = errors(403, 404, 409, 503, 504)
_DELETED = (
    "Deleted, with every analysis result made from it (as its subject or with it as the"
    " second reference) and its share of the storage quota given back. Finished operations"
    " and their notifications stay; a past operation's result is then `result_not_found`."
    " While an analysis that uses it has not finished: 409 `analysis_active`, whose"
    " `operation_id` names the operation to cancel first"
)
openapi_schemas: Mapping[str, Any] = {
    "Job": {
        "type": "object",
        "required": ["id", "title", "company", "description", "created_at", "updated_at"],
        "additionalProperties": False,
        "properties": {
            "id": {"type": "string"},
            "title": {"type": "string", "maxLength": JOB_TITLE_MAX},
            "company": {"type": "string", "maxLength": JOB_COMPANY_MAX},
            "description": {"type": "string", "maxLength": JOB_DESCRIPTION_MAX},
            "created_at": _TIME,
            "updated_at": _TIME,
        },
    },
    "NewJob": {
        "type": "object",
        "required": ["title", "description"],
        "additionalProperties": False,
        "properties": {
            "title": single_line_text(JOB_TITLE_MAX),
            "company": single_line_text(JOB_COMPANY_MAX, required=False),
            "description": multi_line_text(JOB_DESCRIPTION_MAX),
        },
    },
    "JobList": list_of("Job"),
    "Attachment": {
        "type": "object",
        "required": ["id", "kind", "filename", "text_length", "created_at"],
        "additionalProperties": False,
        "properties": {
            "id": {"type": "string"},
            "kind": {"type": "string", "enum": ["cv"]},
            "filename": {"type": "string", "maxLength": ATTACHMENT_FILENAME_MAX},
            "text": {
                "type": "string",
                "maxLength": ATTACHMENT_TEXT_MAX,
                "description": "only on GET /api/attachments/{id}",
            },
            "text_length": {"type": "integer"},
            "created_at": _TIME,
        },
    },
    "NewAttachment": {
        "type": "object",
        "required": ["kind", "filename", "text"],
        "additionalProperties": False,
        "properties": {
            "kind": {"type": "string", "enum": ["cv"]},
            "filename": single_line_text(ATTACHMENT_FILENAME_MAX),
            "text": multi_line_text(ATTACHMENT_TEXT_MAX),
        },
    },
    "AttachmentList": list_of("Attachment"),
    "AiSettings": {
        "type": "object",
        "required": ["ai_enabled", "privacy", "plan", "budget"],
        "additionalProperties": False,
        "properties": {
            "ai_enabled": {"type": "boolean"},
            "privacy": {"type": "string", "enum": list(PRIVACY_CHOICES)},
            "plan": {"type": "string", "enum": ["free", "pro"], "readOnly": True},
            "budget": {
                "type": "object",
                "readOnly": True,
                "description": "today's model-token budget; admission refuses past"
                " reserved + spent (429 budget_exhausted)",
                "required": ["limit", "spent", "reserved", "renews_at"],
                "additionalProperties": False,
                "properties": {
                    "limit": {"type": "integer", "description": "tokens per UTC day"},
                    "spent": {"type": "integer", "description": "by ended attempts today"},
                    "reserved": {"type": "integer", "description": "held by running analyses"},
                    "renews_at": _TIME,
                },
            },
        },
    },
    "AiSettingsUpdate": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "ai_enabled": {"type": "boolean"},
            "privacy": {"type": "string", "enum": list(PRIVACY_CHOICES)},
        },
    },
}
_JOBS, _ATTACHMENTS, _SETTINGS = "jobs", "attachments", "settings"
_ETAG_HEADER = {
    "description": "a strong validator of this page as sent; send it back in `If-None-Match`",
    "schema": {"type": "string"},
}
_IF_NONE_MATCH = {
    "name": "If-None-Match",
    "in": "header",
    "required": False,
    "description": "the `ETag` of the page as last read: unchanged, the answer is a 304",
    "schema": {"type": "string"},
}


def _validated_list(summary: str, operation_id: str, tag: str, what: str, schema: str) -> Any:
    """The OpenAPI operation of a list whose pages carry an ``ETag`` (``_validated``)."""
    with_tag = {"headers": {"ETag": _ETAG_HEADER}}
    unchanged = "the page is the one `If-None-Match` names: no body"
    return endpoint(
        summary,
        operation_id,
        tag,
        {
            "200": {**ok(f"a page of {what}", ref(schema)), **with_tag},
            "304": {"description": unchanged, **with_tag},
            **errors(400, 503, 504),
        },
        parameters=[*PAGE_PARAMETERS, _IF_NONE_MATCH],
    )


openapi_paths: Mapping[str, Mapping[str, Any]] = {
    "/api/jobs": {
        "post": endpoint(
            "Save a job posting",
            "createJob",
            _JOBS,
            {"201": ok("the job", ref("Job")), **_CREATE_ERRORS},
            request_body=json_body(ref("NewJob")),
        ),
        "get": _validated_list(
            "List the caller's jobs, newest first", "listJobs", _JOBS, "jobs", "JobList"
        ),
    },
    "/api/jobs/{id}": {
        "get": endpoint(
            "One job of the caller",
            "getJob",
            _JOBS,
            {"200": ok("the job", ref("Job")), **errors(404, 503, 504)},
            parameters=[path_id("job id")],
        ),
        "delete": endpoint(
            "Delete one job of the caller and the results made from it",
            "deleteJob",
            _JOBS,
            {"204": ok(_DELETED), **_DELETE_ERRORS},
            parameters=[path_id("job id")],
        ),
    },
    "/api/attachments": {
        "post": endpoint(
            "Save a CV as text",
            "createAttachment",
            _ATTACHMENTS,
            {"201": ok("the attachment, without its text", ref("Attachment")), **_CREATE_ERRORS},
            request_body=json_body(ref("NewAttachment")),
        ),
        "get": _validated_list(
            "List the caller's attachments (without text), newest first",
            "listAttachments",
            _ATTACHMENTS,
            "attachments",
            "AttachmentList",
        ),
    },
    "/api/attachments/{id}": {
        "get": endpoint(
            "One attachment of the caller, with its text",
            "getAttachment",
            _ATTACHMENTS,
            {"200": ok("the attachment", ref("Attachment")), **errors(404, 503, 504)},
            parameters=[path_id("attachment id")],
        ),
        "delete": endpoint(
            "Delete one CV of the caller and the results made from it",
            "deleteAttachment",
            _ATTACHMENTS,
            {"204": ok(_DELETED), **_DELETE_ERRORS},
            parameters=[path_id("attachment id")],
        ),
    },
    "/api/settings/ai": {
        "get": endpoint(
            "The caller's AI settings and plan",
            "getAiSettings",
            _SETTINGS,
            {"200": ok("the settings", ref("AiSettings")), **errors(503, 504)},
        ),
        "put": endpoint(
            "Change AI on/off and the privacy choice (the plan is read-only)",
            "putAiSettings",
            _SETTINGS,
            {"200": ok("the settings", ref("AiSettings")), **_WRITE_ERRORS},
            request_body=json_body(ref("AiSettingsUpdate")),
        ),
    },
}
