"""``opsctl serve workspace``: the Workspace gRPC server."""

from __future__ import annotations

from durable_ops.workspace.v1 import workspace_pb2_grpc as pb_grpc

from services.clock import Clock, utc_now
from services.rpc.server import serve_servicer
from services.settings import Settings
from services.storage.migrate import open_migrated
from services.workspace.service import SERVICE_NAME, WorkspaceService


async def run(settings: Settings, *, clock: Clock = utc_now) -> None:
    db = open_migrated(settings.database_url)

    async def close() -> None:
        db.dispose()

    await serve_servicer(
        settings.workspace_bind,
        pb_grpc.add_WorkspaceServiceServicer_to_server,
        WorkspaceService(db, clock),
        SERVICE_NAME,
        secret=settings.service_secret,
        on_stop=close,
    )
