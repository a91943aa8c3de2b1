"""``opsctl serve operations``: the Operations gRPC server and its sweeper."""

from __future__ import annotations

import asyncio
import contextlib

from durable_ops.api.operations.v1 import operations_pb2_grpc as pb_grpc
from durable_ops.clock import Clock, utc_now
from durable_ops.operations.cancel_watch import CancelWatch
from durable_ops.operations.claim_waiters import ClaimWaiters
from durable_ops.operations.service import SERVICE_NAME, OperationsService
from durable_ops.operations.sweeper import run_sweeper
from durable_ops.rpc.server import serve_servicer
from durable_ops.settings import Settings
from durable_ops.storage.migrate import open_migrated


async def run(settings: Settings, *, clock: Clock = utc_now) -> None:
    db = open_migrated(settings.database_url, pool_size=16)
    service = OperationsService(
        db,
        clock,
        cancels=CancelWatch(db, settings.cancel_watch_interval_seconds),
        claims=ClaimWaiters(db, clock, settings.claim_poll_interval_seconds),
    )
    sweeper = asyncio.create_task(
        run_sweeper(
            db, clock, settings.sweep_interval_seconds, on_requeue=service.claims.arrived_any
        )
    )

    async def stop() -> None:
        sweeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sweeper
        await service.close()
        db.dispose()

    await serve_servicer(
        settings.operations_bind,
        pb_grpc.add_OperationsServiceServicer_to_server,
        service,
        SERVICE_NAME,
        secret=settings.service_secret,
        on_stop=stop,
    )
