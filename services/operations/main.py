"""``opsctl serve operations``: the Operations gRPC server and its sweeper."""

from __future__ import annotations

import asyncio
import contextlib

from durable_ops.operations.v1 import operations_pb2_grpc as pb_grpc

from services.clock import Clock, utc_now
from services.operations.service import SERVICE_NAME, OperationsService
from services.operations.sweeper import run_sweeper
from services.rpc.server import serve_servicer
from services.settings import Settings
from services.storage.migrate import open_migrated


async def run(settings: Settings, *, clock: Clock = utc_now) -> None:
    db = open_migrated(settings.database_url, pool_size=16)
    sweeper = asyncio.create_task(run_sweeper(db, clock, settings.sweep_interval_seconds))

    async def stop_sweeper() -> None:
        sweeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sweeper
        db.dispose()

    await serve_servicer(
        settings.operations_bind,
        pb_grpc.add_OperationsServiceServicer_to_server,
        OperationsService(db, clock),
        SERVICE_NAME,
        secret=settings.service_secret,
        on_stop=stop_sweeper,
    )
