"""``opsctl serve workspace``: the Workspace gRPC server."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from durable_ops.api.workspace.v1 import workspace_pb2_grpc as pb_grpc
from durable_ops.clock import Clock, utc_now
from durable_ops.rpc.metrics import GrpcServerMetrics, serve_metrics_if
from durable_ops.rpc.server import serve_servicer
from durable_ops.settings import Settings
from durable_ops.storage.availability import DatabaseReadiness, open_when_reachable
from durable_ops.storage.db import Database
from durable_ops.workspace.service import SERVICE_NAME, WorkspaceService


async def run(settings: Settings, *, clock: Clock = utc_now) -> None:
    db = Database(settings.database_url)  # connects on first use: prepare waits for it
    registry = CollectorRegistry()
    exporter = serve_metrics_if(
        settings.workspace_metrics_bind, registry, setting="OPS_WORKSPACE_METRICS_BIND"
    )

    async def close() -> None:
        db.dispose()
        if exporter is not None:
            exporter.close()

    await serve_servicer(
        settings.workspace_bind,
        pb_grpc.add_WorkspaceServiceServicer_to_server,
        WorkspaceService(db, clock),
        SERVICE_NAME,
        secret=settings.service_secret,
        on_stop=close,
        prepare=lambda: open_when_reachable(db, settings.database_wait_seconds),
        ready=DatabaseReadiness(db),
        metrics=GrpcServerMetrics(registry),
    )
