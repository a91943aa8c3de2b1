"""``opsctl serve ai-admission``: the AI Admission gRPC server."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry

from durable_ops.ai_admission.metrics import AdmissionMetrics
from durable_ops.ai_admission.service import SERVICE_NAME, AiAdmissionService
from durable_ops.api.ai_admission.v1 import ai_admission_pb2_grpc as pb_grpc
from durable_ops.clock import Clock, utc_now
from durable_ops.model.admission import Limits
from durable_ops.serving import serve_on_database
from durable_ops.settings import Settings
from durable_ops.storage.db import Database


async def run(
    settings: Settings,
    *,
    clock: Clock = utc_now,
    stop_requested: asyncio.Event | None = None,
) -> None:
    limits = Limits(
        per_user=settings.ai_user_limit,
        global_=settings.ai_global_limit,
        global_daily_tokens=settings.ai_global_daily_tokens or None,
    )

    def servicer(db: Database, registry: CollectorRegistry) -> AiAdmissionService:
        return AiAdmissionService(db, clock, limits, AdmissionMetrics(registry))

    await serve_on_database(
        settings,
        bind=settings.ai_admission_bind,
        metrics_bind=settings.ai_admission_metrics_bind,
        metrics_setting="OPS_AI_ADMISSION_METRICS_BIND",
        add_to_server=pb_grpc.add_AiAdmissionServiceServicer_to_server,
        servicer=servicer,
        service_name=SERVICE_NAME,
        stop_requested=stop_requested,
    )
