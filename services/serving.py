"""The life of a gRPC service process.

``serve_on_database``: a process serving one servicer over the database
(``opsctl serve notifications``, ``workspace`` and ``ai-admission``; Operations
runs its sweeper and pruner beside its servicers, and builds its server itself).

``serve_together``: several services in one process (``opsctl serve operations
notifications …``, what ``opsctl up`` runs; ADR 40). Each keeps its own server,
address, database pool and metrics, as in a process of its own; they share the
interpreter, so the imports are paid once, and one stop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import grpc
import structlog
from prometheus_client import CollectorRegistry

from durable_ops.rpc.keys import trusted_keys
from durable_ops.rpc.metrics import GrpcServerMetrics, serve_metrics_if
from durable_ops.rpc.server import build_server, serve
from durable_ops.settings import Settings
from durable_ops.stop_signals import stopping_on_signals
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
    stop_requested: asyncio.Event | None = None,
) -> None:
    """The whole life of a process serving one servicer over the database: build it,
    wait for the database, serve, stop on a signal, then close the database and the
    metrics endpoint (``metrics_bind``, off when empty). ``stop_requested``: as
    ``rpc.server.serve``'s."""
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
        stop_requested=stop_requested,
    )


class ServiceLife(Protocol):
    """A service's whole life, its ``main.run``: serve until ``stop_requested`` is set."""

    def __call__(
        self, settings: Settings, *, stop_requested: asyncio.Event | None = None
    ) -> Awaitable[None]: ...


async def serve_together(settings: Settings, runs: Mapping[str, ServiceLife]) -> None:
    """Run every service of ``runs`` (name -> its life) until SIGTERM/SIGINT, then stop
    them together. Each one's log lines carry its name as their ``process``. When one
    ends on its own (a start that failed: the schema, the database), the others stop
    too and its error is raised: the process is restarted whole, as any other."""
    stop_requested = asyncio.Event()
    with stopping_on_signals(stop_requested.set):
        lives = [
            asyncio.create_task(_named(name, run(settings, stop_requested=stop_requested)))
            for name, run in runs.items()
        ]
        try:
            await asyncio.wait(lives, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop_requested.set()
            ended = await asyncio.gather(*lives, return_exceptions=True)
    for outcome in ended:
        if isinstance(outcome, BaseException):
            raise outcome


async def _named(name: str, life: Awaitable[None]) -> None:
    # A task runs in a copy of the context: the name stays with this service's lines,
    # and with the calls its server handles (grpc.aio starts them from this task).
    structlog.contextvars.bind_contextvars(process=name)
    await life
