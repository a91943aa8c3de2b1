"""A process serving one servicer over the database: ``opsctl serve notifications``,
``workspace`` and ``ai-admission``. (Operations runs its sweeper and pruner beside its
servicers, and builds its server itself.)"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
from prometheus_client import CollectorRegistry

from durable_ops.rpc.keys import trusted_keys
from durable_ops.rpc.metrics import GrpcServerMetrics, serve_metrics_if
from durable_ops.rpc.server import build_server, serve
from durable_ops.settings import Settings
from durable_ops.storage.availability import DatabaseReadiness, open_when_reachable
from durable_ops.storage.db import Database


async def serve_on_database(
    settings: Settings,
    *,
    bind: str,
    metrics_bind: str,
    metrics_setting: str,
    add_to_server: Callable[[Any, grpc.aio.Server], None],
    servicer: Callable[[Database, CollectorRegistry], Any],
    service_name: str,
) -> None:
    """The whole life of a process serving one servicer over the database: build it,
    wait for the database, serve, stop on a signal, then close the database and the
    metrics endpoint (``metrics_bind``, off when empty)."""
    db = Database(settings.database_url)  # connects on first use: prepare waits for it
    registry = CollectorRegistry()
    servicing = servicer(db, registry)
    exporter = serve_metrics_if(metrics_bind, registry, setting=metrics_setting)

    async def close() -> None:
        db.dispose()
        if exporter is not None:
            exporter.close()

    server, _port = build_server(
        bind,
        lambda s: add_to_server(servicing, s),
        [service_name],
        trusted=trusted_keys(settings),
        ready=DatabaseReadiness(db),
        metrics=GrpcServerMetrics(registry),
    )
    await serve(
        server,
        on_stop=close,
        prepare=lambda: open_when_reachable(db, settings.database_wait_seconds),
    )
