"""The AI Admission gRPC servicer: the producer boundary of AI operations."""

from __future__ import annotations

from datetime import datetime

import structlog

from durable_ops.ai_admission.admit import AdmitRequest, admit, lookup, retry
from durable_ops.ai_admission.metrics import AdmissionMetrics
from durable_ops.api.ai_admission.v1 import ai_admission_pb2 as pb
from durable_ops.api.ai_admission.v1 import ai_admission_pb2_grpc as pb_grpc
from durable_ops.clock import Clock
from durable_ops.model import admission
from durable_ops.model.admission import Limits
from durable_ops.model.errors import DomainError, InvalidArgument
from durable_ops.model.scope import require_user_agent
from durable_ops.rpc import ServicerContext
from durable_ops.rpc.scope import caller_scope
from durable_ops.storage.db import Database
from durable_ops.telemetry import current_traceparent
from durable_ops.wire.operations import from_timestamp, operation, status_url, timestamp

log = structlog.get_logger(__name__)
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["AiAdmissionService"].full_name


class AiAdmissionService(pb_grpc.AiAdmissionServiceServicer):
    def __init__(
        self, db: Database, clock: Clock, limits: Limits, metrics: AdmissionMetrics | None = None
    ) -> None:
        self._db = db
        self._metrics = metrics
        self._clock = clock
        self._limits = limits

    async def Admit(self, request: pb.AdmitRequest, context: ServicerContext) -> pb.AdmitResponse:
        owner = require_user_agent(caller_scope(context)).owner_id
        admit_request = AdmitRequest(
            task_type=request.task_type,
            subject_id=request.subject_id,
            context_ref=request.context_ref,
            idempotency_key=request.idempotency_key,
            not_before=_not_before(request),
            trace_parent=current_traceparent(),
        )
        now = self._clock()
        try:
            row, reused = await self._db.run_async(
                lambda tx: admit(tx, admit_request, self._limits, now), owner_id=owner
            )
        except DomainError as refused:
            if self._metrics is not None:
                self._metrics.refused_for(refused.code)
            raise
        if self._metrics is not None:
            self._metrics.answered(reused=reused)
        log.info(
            "ai_admitted",
            operation_id=row.id,
            owner=owner,
            task_type=row.task_type,
            reused=reused,
        )
        response = pb.AdmitResponse(
            operation=operation(row), reused=reused, status_url=status_url(row.id)
        )
        waits_until = admission.waits_until(row.state, row.not_before, now)
        if waits_until is not None:
            response.not_before.CopyFrom(timestamp(waits_until))
        return response

    async def Retry(self, request: pb.RetryRequest, context: ServicerContext) -> pb.AdmitResponse:
        owner = require_user_agent(caller_scope(context)).owner_id
        now = self._clock()
        try:
            row = await self._db.run_async(
                lambda tx: retry(tx, request.operation_id, self._limits, now), owner_id=owner
            )
        except DomainError as refused:
            if self._metrics is not None:
                self._metrics.refused_for(refused.code)
            raise
        log.info("operation_retried", operation_id=row.id, owner=owner, task_type=row.task_type)
        return pb.AdmitResponse(operation=operation(row), status_url=status_url(row.id))

    async def Lookup(
        self, request: pb.LookupRequest, context: ServicerContext
    ) -> pb.LookupResponse:
        owner = require_user_agent(caller_scope(context)).owner_id
        row = await self._db.run_async(
            lambda tx: lookup(tx, request.task_type, request.subject_id),
            owner_id=owner,
            write=False,
        )
        return pb.LookupResponse(operation=operation(row)) if row else pb.LookupResponse()


def _not_before(request: pb.AdmitRequest) -> datetime | None:
    if not request.HasField("not_before"):
        return None
    try:
        return from_timestamp(request.not_before)
    except ValueError:
        raise InvalidArgument("not_before", "is not a valid timestamp") from None
