"""``opsctl serve operations``: the Operations gRPC server, its sweeper and its pruner."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta

import grpc
from prometheus_client import CollectorRegistry

from durable_ops.api.operations.v1 import operations_pb2_grpc as pb_grpc
from durable_ops.api.operator.v1 import operator_pb2_grpc
from durable_ops.clock import Clock, utc_now
from durable_ops.model.retention import PRUNE_BATCH, policy_of_days
from durable_ops.operations.app import OperationsApp
from durable_ops.operations.longrunning import SERVICE_NAME as LRO_SERVICE_NAME
from durable_ops.operations.longrunning import LongRunningOperations
from durable_ops.operations.longrunning import add_to_server as add_lro_to_server
from durable_ops.operations.metrics import OperationsMetrics
from durable_ops.operations.operator import DEFAULT_TOMBSTONES, OperatorService
from durable_ops.operations.operator import SERVICE_NAME as OPERATOR_SERVICE_NAME
from durable_ops.operations.pruner import run_pruner
from durable_ops.operations.service import SERVICE_NAME, OperationsService
from durable_ops.operations.sweeper import run_sweeper
from durable_ops.operations.tuning import TUNING
from durable_ops.rpc.keys import trusted_keys
from durable_ops.rpc.metrics import GrpcServerMetrics, serve_metrics_if
from durable_ops.rpc.open_calls import OpenCalls
from durable_ops.rpc.server import build_server, serve
from durable_ops.settings import Settings
from durable_ops.storage.availability import DatabaseReadiness, open_when_reachable
from durable_ops.storage.db import Database

SERVICE_NAMES = (SERVICE_NAME, LRO_SERVICE_NAME, OPERATOR_SERVICE_NAME)


def registration(
    app: OperationsApp, *, tombstones: timedelta = DEFAULT_TOMBSTONES
) -> Callable[[grpc.aio.Server], None]:
    """Both faces of the service on one server, ours and google.longrunning's, counting
    their callers' open calls together, and the operator's service on the same watches
    (ADR 19)."""

    def register(server: grpc.aio.Server) -> None:
        open_calls = OpenCalls()
        pb_grpc.add_OperationsServiceServicer_to_server(OperationsService(app, open_calls), server)
        add_lro_to_server(LongRunningOperations(app, open_calls), server)
        operator = OperatorService(app, tombstones=tombstones)
        operator_pb2_grpc.add_OperatorServiceServicer_to_server(operator, server)

    return register


async def run(
    settings: Settings,
    *,
    clock: Clock = utc_now,
    stop_requested: asyncio.Event | None = None,
) -> None:
    db = Database(settings.database_url, pool_size=16)  # connects on first use
    registry = CollectorRegistry()
    metrics = OperationsMetrics(registry, db, clock)
    app = OperationsApp(db, clock, metrics=metrics)
    exporter = serve_metrics_if(
        settings.operations_metrics_bind, registry, setting="OPS_OPERATIONS_METRICS_BIND"
    )
    loops: list[asyncio.Task[None]] = []  # the sweeper and the pruner

    async def prepare() -> None:
        # Health says NOT_SERVING (and calls are refused) until the database answers.
        await open_when_reachable(db, settings.database_wait_seconds)
        sweeper = run_sweeper(db, clock, TUNING.sweep_interval_seconds, metrics=metrics)
        loops.append(asyncio.create_task(sweeper))
        policy = None  # retention off: the pruner keeps house only
        if settings.retention_days:
            policy = policy_of_days(settings.retention_days, settings.tombstone_retention_days)
        pruner = run_pruner(db, clock, policy, PRUNE_BATCH, metrics=metrics)
        loops.append(asyncio.create_task(pruner))

    async def stop() -> None:
        for task in loops:
            task.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
        await app.close()
        db.dispose()
        if exporter is not None:
            exporter.close()

    server, _port = build_server(
        settings.operations_bind,
        registration(app, tombstones=timedelta(days=settings.tombstone_retention_days)),
        SERVICE_NAMES,
        trusted=trusted_keys(settings),
        ready=DatabaseReadiness(db),
        metrics=GrpcServerMetrics(registry),
    )
    await serve(server, on_stop=stop, prepare=prepare, stop_requested=stop_requested)
