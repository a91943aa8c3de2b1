"""``opsctl serve notifications``: the Notifications gRPC server."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry

from durable_ops.api.notifications.v1 import notifications_pb2_grpc as pb_grpc
from durable_ops.clock import Clock, utc_now
from durable_ops.notifications.service import SERVICE_NAME, NotificationsService
from durable_ops.serving import serve_on_database
from durable_ops.settings import Settings
from durable_ops.storage.db import Database


async def run(
    settings: Settings,
    *,
    clock: Clock = utc_now,
    stop_requested: asyncio.Event | None = None,
) -> None:
    def servicer(db: Database, _registry: CollectorRegistry) -> NotificationsService:
        return NotificationsService(db, clock)

    await serve_on_database(
        settings,
        bind=settings.notifications_bind,
        metrics_bind=settings.notifications_metrics_bind,
        metrics_setting="OPS_NOTIFICATIONS_METRICS_BIND",
        add_to_server=pb_grpc.add_NotificationsServiceServicer_to_server,
        servicer=servicer,
        service_name=SERVICE_NAME,
        stop_requested=stop_requested,
    )
