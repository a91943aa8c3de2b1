"""Build and run a grpc.aio server: health, reflection, credential check, graceful stop.

``build_server`` registers the services and binds; ``start`` marks them SERVING
in the health service and starts; ``serve`` also waits and, on SIGTERM/SIGINT,
turns health NOT_SERVING, stops with a grace period and runs ``on_stop``.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from durable_ops.model.errors import DomainError
from durable_ops.rpc import ServicerContext
from durable_ops.rpc.errors import trailing_metadata_for
from durable_ops.rpc.scope import remember_verified_role, role_from_metadata
from durable_ops.settings import Settings

# Probes and tooling must work without a service credential.
PUBLIC_SERVICES = (health.SERVICE_NAME, reflection.SERVICE_NAME)

SERVER_OPTIONS: tuple[tuple[str, int], ...] = (
    # A second process on the same port must fail to bind, not share the traffic.
    ("grpc.so_reuseport", 0),
    # Heartbeat streams stay open for minutes: let clients ping to keep them alive,
    # and ping idle clients so dead peers are noticed.
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.keepalive_time_ms", 60_000),
    ("grpc.keepalive_timeout_ms", 20_000),
)

_log = structlog.get_logger(__name__)


class _Registration:
    def __init__(self, health_servicer: Any, service_names: Sequence[str]) -> None:
        self.health = health_servicer
        self.service_names = tuple(service_names)


_registrations: weakref.WeakKeyDictionary[Any, _Registration] = weakref.WeakKeyDictionary()


def _is_public(method: str) -> bool:
    service = method.lstrip("/").partition("/")[0]
    return service in PUBLIC_SERVICES


def _rejecting_handler(handler: Any, error: DomainError) -> Any:
    """A handler of the same shape as ``handler`` that only aborts with ``error``."""

    async def reject(_request: Any, context: ServicerContext) -> None:
        await context.abort(
            grpc.StatusCode.UNAUTHENTICATED,
            error.message,
            trailing_metadata=trailing_metadata_for(error),
        )

    if handler.request_streaming and handler.response_streaming:
        factory = grpc.stream_stream_rpc_method_handler
    elif handler.request_streaming:
        factory = grpc.stream_unary_rpc_method_handler
    elif handler.response_streaming:
        factory = grpc.unary_stream_rpc_method_handler
    else:
        factory = grpc.unary_unary_rpc_method_handler
    return factory(
        reject,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )


class CredentialInterceptor(grpc.aio.ServerInterceptor):
    """Rejects calls without a valid service credential; remembers the caller's role."""

    def __init__(self, secret: str) -> None:
        self._secret = secret

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], handler_call_details: Any
    ) -> Any:
        handler = await continuation(handler_call_details)
        if handler is None or _is_public(handler_call_details.method):
            return handler
        try:
            role = role_from_metadata(handler_call_details.invocation_metadata or (), self._secret)
        except DomainError as error:
            return _rejecting_handler(handler, error)
        # grpc.aio calls the handler in this same contextvars.Context.
        remember_verified_role(role)
        return handler


def build_server(
    bind: str,
    register: Callable[[grpc.aio.Server], None],
    service_names: Sequence[str],
    *,
    secret: str | None = None,
) -> tuple[grpc.aio.Server, int]:
    """A server with ``register``ed services, health and reflection; returns it and its port.

    ``secret`` defaults to ``OPS_SERVICE_SECRET``. Call from inside the event loop.
    """
    service_secret = Settings.from_env().service_secret if secret is None else secret
    server = grpc.aio.server(
        interceptors=(CredentialInterceptor(service_secret),), options=SERVER_OPTIONS
    )
    register(server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection((*service_names, *PUBLIC_SERVICES), server)
    port: int = server.add_insecure_port(bind)
    if port == 0:
        raise RuntimeError(f"could not bind gRPC server to {bind}")
    _registrations[server] = _Registration(health_servicer, service_names)
    return server, port


def _registration(server: grpc.aio.Server) -> _Registration:
    registration = _registrations.get(server)
    if registration is None:
        raise ValueError("server was not made by build_server")
    return registration


async def start(server: grpc.aio.Server) -> None:
    """Mark "" and every service SERVING, then start accepting calls."""
    registration = _registration(server)
    for name in ("", *registration.service_names):
        await registration.health.set(name, health_pb2.HealthCheckResponse.SERVING)
    await server.start()


async def stop(server: grpc.aio.Server, grace: float) -> None:
    """NOT_SERVING first so balancers drain, then let in-flight calls finish for ``grace``."""
    await _registration(server).health.enter_graceful_shutdown()
    await server.stop(grace)


async def serve(
    server: grpc.aio.Server,
    *,
    grace: float = 5.0,
    on_stop: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Start, run until SIGTERM/SIGINT (or cancellation), then stop gracefully."""
    loop = asyncio.get_running_loop()
    stop_requested = asyncio.Event()
    installed = _install_signal_handlers(loop, stop_requested.set)
    try:
        await start(server)
        _log.info("grpc_serving", services=list(_registration(server).service_names))
        signalled = asyncio.ensure_future(stop_requested.wait())
        # Shielded: cancelling a plain wait_for_termination() cancels the server's own
        # shutdown future, and stop() would then fail with CancelledError.
        terminated = asyncio.shield(server.wait_for_termination())
        try:
            either: set[asyncio.Future[Any]] = {signalled, terminated}
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        finally:
            signalled.cancel()
            terminated.cancel()
    finally:
        for signum in installed:
            loop.remove_signal_handler(signum)
        _log.info("grpc_stopping", grace_seconds=grace)
        await stop(server, grace)
        if on_stop is not None:
            await on_stop()
        _log.info("grpc_stopped")


def _install_signal_handlers(
    loop: asyncio.AbstractEventLoop, callback: Callable[[], None]
) -> list[signal.Signals]:
    installed = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        # Not possible off the main thread or on Windows: then the caller stops us by cancelling.
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signum, callback)
            installed.append(signum)
    return installed


async def serve_servicer(
    bind: str,
    add_to_server: Callable[[Any, grpc.aio.Server], None],
    servicer: Any,
    service_name: str,
    *,
    secret: str,
    on_stop: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """The whole life of a one-service process: build, serve, stop on a signal."""
    server, _port = build_server(
        bind, lambda s: add_to_server(servicer, s), [service_name], secret=secret
    )
    await serve(server, on_stop=on_stop)
