"""``opsctl serve notifications``: the Notifications gRPC server."""

from __future__ import annotations

from durable_ops.api.notifications.v1 import notifications_pb2_grpc as pb_grpc
from durable_ops.clock import Clock, utc_now
from durable_ops.notifications.service import SERVICE_NAME, NotificationsService
from durable_ops.rpc.server import serve_servicer
from durable_ops.settings import Settings
from durable_ops.storage.availability import DatabaseReadiness, open_when_reachable
from durable_ops.storage.db import Database


async def run(settings: Settings, *, clock: Clock = utc_now) -> None:
    db = Database(settings.database_url)  # connects on first use: prepare waits for it

    async def close() -> None:
        db.dispose()

    await serve_servicer(
        settings.notifications_bind,
        pb_grpc.add_NotificationsServiceServicer_to_server,
        NotificationsService(db, clock),
        SERVICE_NAME,
        secret=settings.service_secret,
        on_stop=close,
        prepare=lambda: open_when_reachable(db, settings.database_wait_seconds),
        ready=DatabaseReadiness(db),
    )
