"""``opsctl serve notifications``: the Notifications gRPC server."""

from __future__ import annotations

from durable_ops.notifications.v1 import notifications_pb2_grpc as pb_grpc

from services.clock import Clock, utc_now
from services.notifications.service import SERVICE_NAME, NotificationsService
from services.rpc.server import build_server, serve
from services.settings import Settings
from services.storage.db import Database
from services.storage.migrate import require_current


async def run(settings: Settings, *, clock: Clock = utc_now) -> None:
    db = Database(settings.database_url)
    require_current(db.engine)
    servicer = NotificationsService(db, clock)
    server, _port = build_server(
        settings.notifications_bind,
        lambda s: pb_grpc.add_NotificationsServiceServicer_to_server(servicer, s),  # type: ignore[no-untyped-call]
        [SERVICE_NAME],
        secret=settings.service_secret,
    )

    async def close() -> None:
        db.dispose()

    await serve(server, on_stop=close)
