"""``opsctl serve ai-admission``: the AI Admission gRPC server."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from durable_ops.ai_admission.metrics import AdmissionMetrics
from durable_ops.ai_admission.service import SERVICE_NAME, AiAdmissionService
from durable_ops.api.ai_admission.v1 import ai_admission_pb2_grpc as pb_grpc
from durable_ops.clock import Clock, utc_now
from durable_ops.model.admission import Limits
from durable_ops.rpc.metrics import GrpcServerMetrics, serve_metrics_if
from durable_ops.rpc.server import serve_servicer
from durable_ops.settings import Settings
from durable_ops.storage.availability import DatabaseReadiness, open_when_reachable
from durable_ops.storage.db import Database


async def run(settings: Settings, *, clock: Clock = utc_now) -> None:
    db = Database(settings.database_url)  # connects on first use: prepare waits for it
    limits = Limits(per_user=settings.ai_user_limit, global_=settings.ai_global_limit)
    registry = CollectorRegistry()
    exporter = serve_metrics_if(
        settings.ai_admission_metrics_bind, registry, setting="OPS_AI_ADMISSION_METRICS_BIND"
    )

    async def close() -> None:
        db.dispose()
        if exporter is not None:
            exporter.close()

    await serve_servicer(
        settings.ai_admission_bind,
        pb_grpc.add_AiAdmissionServiceServicer_to_server,
        AiAdmissionService(db, clock, limits, AdmissionMetrics(registry)),
        SERVICE_NAME,
        secret=settings.service_secret,
        on_stop=close,
        prepare=lambda: open_when_reachable(db, settings.database_wait_seconds),
        ready=DatabaseReadiness(db),
        metrics=GrpcServerMetrics(registry),
    )
