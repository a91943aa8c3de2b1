"""``opsctl serve notifications``: the Notifications gRPC server."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from durable_ops.api.notifications.v1 import notifications_pb2_grpc as pb_grpc
from durable_ops.clock import Clock, utc_now
from durable_ops.notifications.metrics import register_notifications_metrics
from durable_ops.notifications.service import SERVICE_NAME, NotificationsService
from durable_ops.rpc.metrics import GrpcServerMetrics, serve_metrics_if
from durable_ops.rpc.server import serve_servicer
from durable_ops.settings import Settings
from durable_ops.storage.availability import DatabaseReadiness, open_when_reachable
from durable_ops.storage.db import Database


async def run(settings: Settings, *, clock: Clock = utc_now) -> None:
    db = Database(settings.database_url)  # connects on first use: prepare waits for it
    registry = CollectorRegistry()
    register_notifications_metrics(registry, db)
    exporter = serve_metrics_if(
        settings.notifications_metrics_bind, registry, setting="OPS_NOTIFICATIONS_METRICS_BIND"
    )

    async def close() -> None:
        db.dispose()
        if exporter is not None:
            exporter.close()

    await serve_servicer(
        settings.notifications_bind,
        pb_grpc.add_NotificationsServiceServicer_to_server,
        NotificationsService(db, clock),
        SERVICE_NAME,
        secret=settings.service_secret,
        on_stop=close,
        prepare=lambda: open_when_reachable(db, settings.database_wait_seconds),
        ready=DatabaseReadiness(db),
        metrics=GrpcServerMetrics(registry),
    )
