"""The Workspace gRPC servicer: the owner's jobs, CVs, AI settings and notes, and sign-in
sessions (``storage.sessions``)."""

from __future__ import annotations

from datetime import UTC, datetime

import structlog

from durable_ops.api.workspace.v1 import workspace_pb2 as pb
from durable_ops.api.workspace.v1 import workspace_pb2_grpc as pb_grpc
from durable_ops.clock import Clock
from durable_ops.model.errors import InvalidArgument
from durable_ops.model.scope import (
    ReadLease,
    require_gateway_owner,
    require_subject_reader,
    require_user_agent,
    require_worker_owner,
)
from durable_ops.rpc import ServicerContext
from durable_ops.rpc.scope import caller_scope, require_gateway_without_owner
from durable_ops.storage import budgets, sessions, workspace
from durable_ops.storage.db import Database
from durable_ops.storage.tx import Tx
from durable_ops.wire import workspace as convert

log = structlog.get_logger(__name__)
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["WorkspaceService"].full_name


class WorkspaceService(pb_grpc.WorkspaceServiceServicer):
    def __init__(self, db: Database, clock: Clock) -> None:
        self._db = db
        self._clock = clock

    async def CreateJob(self, request: pb.CreateJobRequest, context: ServicerContext) -> pb.Job:
        owner = require_user_agent(caller_scope(context)).owner_id
        now = self._clock()
        row = await self._db.run_async(
            lambda tx: workspace.create_job(
                tx, request.title, request.company, request.description, now
            ),
            owner_id=owner,
        )
        log.info("job_created", owner=owner, job_id=row.id)
        return convert.job(row)

    async def GetJob(self, request: pb.GetJobRequest, context: ServicerContext) -> pb.Job:
        reader = require_subject_reader(caller_scope(context), _lease(request))
        now = self._clock()
        row = await self._db.run_async(
            lambda tx: workspace.get_job(tx, request.job_id, lease=reader.lease, now=now),
            owner_id=reader.owner_id,
            write=False,
        )
        return convert.job(row)

    async def ListJobs(
        self, request: pb.ListRequest, context: ServicerContext
    ) -> pb.ListJobsResponse:
        owner = require_user_agent(caller_scope(context)).owner_id
        page = await self._db.run_async(
            lambda tx: workspace.list_jobs(tx, size=request.page_size, token=request.page_token),
            owner_id=owner,
            write=False,
        )
        return pb.ListJobsResponse(
            jobs=[convert.job(row) for row in page.items], next_page_token=page.next_token or ""
        )

    async def CreateAttachment(
        self, request: pb.CreateAttachmentRequest, context: ServicerContext
    ) -> pb.Attachment:
        owner = require_user_agent(caller_scope(context)).owner_id
        now = self._clock()
        row = await self._db.run_async(
            lambda tx: workspace.create_attachment(
                tx, request.kind, request.filename, request.text, now
            ),
            owner_id=owner,
        )
        log.info("attachment_created", owner=owner, attachment_id=row.id)
        return convert.attachment(row, with_text=True)

    async def GetAttachment(
        self, request: pb.GetAttachmentRequest, context: ServicerContext
    ) -> pb.Attachment:
        reader = require_subject_reader(caller_scope(context), _lease(request))
        now = self._clock()
        row = await self._db.run_async(
            lambda tx: workspace.get_attachment(
                tx, request.attachment_id, lease=reader.lease, now=now
            ),
            owner_id=reader.owner_id,
            write=False,
        )
        return convert.attachment(row, with_text=True)

    async def ListAttachments(
        self, request: pb.ListRequest, context: ServicerContext
    ) -> pb.ListAttachmentsResponse:
        owner = require_user_agent(caller_scope(context)).owner_id
        page = await self._db.run_async(
            lambda tx: workspace.list_attachments(
                tx, size=request.page_size, token=request.page_token
            ),
            owner_id=owner,
            write=False,
        )
        return pb.ListAttachmentsResponse(
            attachments=[convert.attachment(row, with_text=False) for row in page.items],
            next_page_token=page.next_token or "",
        )

    async def DeleteJob(
        self, request: pb.DeleteJobRequest, context: ServicerContext
    ) -> pb.DeleteJobResponse:
        owner = require_user_agent(caller_scope(context)).owner_id
        gone = await self._db.run_async(
            lambda tx: workspace.delete_job(tx, request.job_id), owner_id=owner
        )
        _log_deleted("job_deleted", owner, gone, job_id=request.job_id)
        return pb.DeleteJobResponse()

    async def DeleteAttachment(
        self, request: pb.DeleteAttachmentRequest, context: ServicerContext
    ) -> pb.DeleteAttachmentResponse:
        owner = require_user_agent(caller_scope(context)).owner_id
        gone = await self._db.run_async(
            lambda tx: workspace.delete_attachment(tx, request.attachment_id), owner_id=owner
        )
        _log_deleted("attachment_deleted", owner, gone, attachment_id=request.attachment_id)
        return pb.DeleteAttachmentResponse()

    async def GetAiSettings(
        self, request: pb.GetAiSettingsRequest, context: ServicerContext
    ) -> pb.AiSettings:
        reader = require_subject_reader(caller_scope(context), _lease(request))
        now = self._clock()
        return await self._db.run_async(
            lambda tx: _settings_reply(
                tx, workspace.read_ai_settings(tx, lease=reader.lease, now=now), now
            ),
            owner_id=reader.owner_id,
            write=False,
        )

    async def UpdateAiSettings(
        self, request: pb.UpdateAiSettingsRequest, context: ServicerContext
    ) -> pb.AiSettings:
        owner = require_user_agent(caller_scope(context)).owner_id
        now = self._clock()
        enabled = request.ai_enabled if request.HasField("ai_enabled") else None
        privacy = request.privacy if request.HasField("privacy") else None
        reply = await self._db.run_async(
            lambda tx: _settings_reply(
                tx,
                workspace.update_ai_settings(tx, now, ai_enabled=enabled, privacy=privacy),
                now,
            ),
            owner_id=owner,
        )
        log.info("ai_settings_updated", owner=owner, ai_enabled=reply.ai_enabled)
        return reply

    async def GetNote(
        self, request: pb.GetNoteRequest, context: ServicerContext
    ) -> pb.AiWorkspaceNote:
        owner = require_user_agent(caller_scope(context)).owner_id
        row = await self._db.run_async(
            lambda tx: workspace.get_note(
                tx, request.kind, request.subject_type, request.subject_id
            ),
            owner_id=owner,
            write=False,
        )
        return convert.note(row)

    async def GetOperationNote(
        self, request: pb.GetOperationNoteRequest, context: ServicerContext
    ) -> pb.AiWorkspaceNote:
        owner = require_user_agent(caller_scope(context)).owner_id
        row = await self._db.run_async(
            lambda tx: workspace.get_operation_note(tx, request.operation_id),
            owner_id=owner,
            write=False,
        )
        return convert.note(row)

    async def PublishNote(
        self, request: pb.PublishNoteRequest, context: ServicerContext
    ) -> pb.PublishNoteResponse:
        owner = require_worker_owner(caller_scope(context)).owner_id
        now = self._clock()
        row, published = await self._db.run_async(
            lambda tx: workspace.publish_note(
                tx,
                kind=request.kind,
                subject_type=request.subject_type,
                subject_id=request.subject_id,
                operation_id=request.operation_id,
                lease_token=request.lease_token,
                body_json=request.body_json,
                now=now,
                provenance=(request.provider, request.model, request.route),
            ),
            owner_id=owner,
        )
        log.info("note_published", owner=owner, operation_id=request.operation_id, new=published)
        return pb.PublishNoteResponse(note=convert.note(row), published=published)

    async def CreateSession(
        self, request: pb.CreateSessionRequest, context: ServicerContext
    ) -> pb.CreateSessionResponse:
        owner = require_gateway_owner(caller_scope(context)).owner_id
        now = self._clock()
        issued_at = (
            _instant(request.token_issued_at) if request.HasField("token_issued_at") else None
        )
        session_id, row = await self._db.run_async(
            lambda tx: sessions.create_session(
                tx, now, request.ttl_seconds, token_issued_at=issued_at
            ),
            owner_id=owner,
        )
        log.info("session_created", owner=owner)
        response = pb.CreateSessionResponse(session_id=session_id)
        response.expires_at.FromDatetime(row.expires_at)
        return response

    async def ResolveSession(
        self, request: pb.ResolveSessionRequest, context: ServicerContext
    ) -> pb.ResolveSessionResponse:
        """Every authenticated gateway request comes here: one primary-key read, no write."""
        require_gateway_without_owner(context)
        if request.WhichOneof("credential") == "token":
            user = request.token.user_id
            issued_at = _instant(request.token.issued_at)
            await self._db.run_async(
                lambda tx: sessions.check_token(tx, issued_at), owner_id=user, write=False
            )
            return pb.ResolveSessionResponse(user_id=user)
        now = self._clock()
        owner = await self._db.run_async(
            lambda tx: sessions.resolve_session(tx, request.session_id, now),
            owner_id=None,
            write=False,
        )
        return pb.ResolveSessionResponse(user_id=owner)

    async def DeleteSession(
        self, request: pb.DeleteSessionRequest, context: ServicerContext
    ) -> pb.DeleteSessionResponse:
        require_gateway_without_owner(context)
        deleted = await self._db.run_async(
            lambda tx: sessions.delete_session(tx, request.session_id), owner_id=None
        )
        return pb.DeleteSessionResponse(deleted=deleted)


def _log_deleted(event: str, owner: str, gone: workspace.Deleted, **row_id: str) -> None:
    """Counts of what went with the row, never its content."""
    log.info(
        event,
        owner=owner,
        **row_id,
        results=gone.results,
        drafts=gone.drafts,
        stored_bytes=gone.stored_bytes,
    )


def _lease(
    request: pb.GetJobRequest | pb.GetAttachmentRequest | pb.GetAiSettingsRequest,
) -> ReadLease:
    """The lease a worker's read names (empty from the gateway)."""
    return ReadLease(request.operation_id, request.lease_token)


def _instant(unix_seconds: int) -> datetime:
    try:
        return datetime.fromtimestamp(unix_seconds, UTC)
    except (OverflowError, OSError, ValueError):
        raise InvalidArgument("issued_at", "is not a time") from None


def _settings_reply(tx: Tx, view: workspace.AiSettingsView, now: datetime) -> pb.AiSettings:
    """The settings and, beside them, today's token budget (ADR 0041)."""
    return convert.ai_settings(view, budgets.view(tx, view.plan, now))
