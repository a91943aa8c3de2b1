"""``opsctl serve notifications``: the Notifications gRPC server."""

from __future__ import annotations

from durable_ops.notifications.v1 import notifications_pb2_grpc as pb_grpc

from services.clock import Clock, utc_now
from services.notifications.service import SERVICE_NAME, NotificationsService
from services.rpc.server import serve_servicer
from services.settings import Settings
from services.storage.migrate import open_migrated


async def run(settings: Settings, *, clock: Clock = utc_now) -> None:
    db = open_migrated(settings.database_url)

    async def close() -> None:
        db.dispose()

    await serve_servicer(
        settings.notifications_bind,
        pb_grpc.add_NotificationsServiceServicer_to_server,
        NotificationsService(db, clock),
        SERVICE_NAME,
        secret=settings.service_secret,
        on_stop=close,
    )
