"""Build and run a grpc.aio server: health, reflection, credential check, graceful stop.

``build_server`` registers the services and binds; ``start`` marks them SERVING
in the health service and starts; ``serve`` also waits and, on SIGTERM/SIGINT,
turns health NOT_SERVING, stops with a grace period and runs ``on_stop``.

A server may depend on something that can be away (its database, ADR 16):

- ``serve(..., prepare=...)`` starts the server NOT_SERVING, answering health
  and refusing every other call with UNAVAILABLE, runs ``prepare`` (the wait
  for the database), and only then turns SERVING; a ``prepare`` that raises
  stops the server and the error reaches the caller;
- ``build_server(..., ready=...)``: once serving, each health ``Check`` first
  asks ``ready()`` (which caches its answer) and answers NOT_SERVING while it
  says False, SERVING again when it says True. ``Watch`` streams see the
  changes that checks find.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from durable_ops.model.errors import DomainError, Unavailable
from durable_ops.rpc import ServicerContext
from durable_ops.rpc.errors import ErrorInterceptor, status_for, trailing_metadata_for
from durable_ops.rpc.keys import TrustedKeys, trusted_keys
from durable_ops.rpc.metrics import GrpcServerMetrics, MetricsInterceptor
from durable_ops.rpc.scope import key_from_metadata, remember_verified_key
from durable_ops.rpc.tls import server_credentials
from durable_ops.settings import Settings
from durable_ops.stop_signals import stopping_on_signals

# Probes must work without a service credential; reflection, which lists every method
# an attacker could try, answers only a caller with one (issue 35).
PUBLIC_SERVICES = (health.SERVICE_NAME,)

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

Ready = Callable[[], Awaitable[bool]]
"""Whether what the server depends on is there; cheap to call often (it caches)."""
NOT_READY = Unavailable("not serving yet: the service is starting; try again", code="starting")


class _FollowingHealth(health.aio.HealthServicer):  # type: ignore[misc]
    """The standard health service; once ``following``, a ``Check`` asks ``ready`` first."""

    def __init__(self, ready: Ready | None, names: Sequence[str]) -> None:
        super().__init__()
        self._ready = ready
        self._names = ("", *names)
        self._marked: bool | None = None
        self.following = False

    async def mark(self, serving: bool) -> None:
        """Every name SERVING or NOT_SERVING (ignored once the graceful shutdown began)."""
        if self._marked is serving:
            return
        self._marked = serving
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in self._names:
            await self.set(name, status)

    async def Check(self, request: Any, context: Any) -> Any:  # noqa: N802 - the gRPC method
        if self.following and self._ready is not None:
            await self.mark(await self._ready())
        return await super().Check(request, context)


class _Registration:
    def __init__(
        self, health_servicer: _FollowingHealth, service_names: Sequence[str], bind: str
    ) -> None:
        self.bind = bind
        self.health = health_servicer
        self.service_names = tuple(service_names)
        self.accepting = False  # calls other than health (``_StartGate``)


_registrations: weakref.WeakKeyDictionary[Any, _Registration] = weakref.WeakKeyDictionary()


def _is_public(method: str) -> bool:
    service = method.lstrip("/").partition("/")[0]
    return service in PUBLIC_SERVICES


def _rejecting_handler(handler: Any, error: DomainError) -> Any:
    """A handler that only aborts with ``error``, before it reads any request.

    Always request-streaming, whatever the method's shape: grpc.aio reads a unary
    request whole before it calls the handler, so an unauthenticated caller could hold
    a call open by never finishing its message, each pinning up to 4 MiB (an outside
    test held 1.6 GB with 400 streams on one connection, no key needed). A stream's
    handler runs on the call's headers; the wire format is the same either way."""

    async def reject(_requests: Any, context: ServicerContext) -> None:
        await context.abort(
            status_for(error),
            error.message,
            trailing_metadata=trailing_metadata_for(error),
        )

    return grpc.stream_stream_rpc_method_handler(
        reject,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )


class CredentialInterceptor(grpc.aio.ServerInterceptor):
    """Rejects calls without a valid service credential; remembers the caller's key."""

    def __init__(self, trusted: TrustedKeys) -> None:
        self._trusted = trusted

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], handler_call_details: Any
    ) -> Any:
        handler = await continuation(handler_call_details)
        if handler is None or _is_public(handler_call_details.method):
            return handler
        try:
            key = key_from_metadata(handler_call_details.invocation_metadata or (), self._trusted)
        except DomainError as error:
            return _rejecting_handler(handler, error)
        # grpc.aio calls the handler in this same contextvars.Context.
        remember_verified_key(key)
        return handler


class _StartGate(grpc.aio.ServerInterceptor):
    """Refuses every call but health, UNAVAILABLE, until the server serves."""

    def __init__(self) -> None:
        self.registration: _Registration | None = None

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], handler_call_details: Any
    ) -> Any:
        handler = await continuation(handler_call_details)
        if handler is None or _is_public(handler_call_details.method):
            return handler
        if self.registration is None or not self.registration.accepting:
            return _rejecting_handler(handler, NOT_READY)
        return handler


def build_server(
    bind: str,
    register: Callable[[grpc.aio.Server], None],
    service_names: Sequence[str],
    *,
    trusted: TrustedKeys | None = None,
    ready: Ready | None = None,
    metrics: GrpcServerMetrics | None = None,
) -> tuple[grpc.aio.Server, int]:
    """A server with ``register``ed services, health and reflection; returns it and its port.

    ``trusted`` defaults to the keys in ``OPS_SERVICE_KEYS_DIR``; ``ready``, when given, is
    what health checks follow once the server serves; ``metrics``, when given,
    counts and times every call (outermost, so refused calls count too). Call
    from inside the event loop.
    """
    trusted = trusted_keys(Settings.from_env()) if trusted is None else trusted
    gate = _StartGate()
    interceptors: tuple[grpc.aio.ServerInterceptor, ...] = (
        gate,
        CredentialInterceptor(trusted),
        ErrorInterceptor(),
    )
    if metrics is not None:
        interceptors = (MetricsInterceptor(metrics), *interceptors)
    server = grpc.aio.server(interceptors=interceptors, options=SERVER_OPTIONS)
    register(server)
    health_servicer = _FollowingHealth(ready, service_names)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (*service_names, *PUBLIC_SERVICES, reflection.SERVICE_NAME), server
    )
    tls = server_credentials(trusted.directory, bind)
    port: int = server.add_secure_port(bind, tls) if tls else server.add_insecure_port(bind)
    if port == 0:
        raise RuntimeError(f"could not bind gRPC server to {bind}")
    registration = _Registration(health_servicer, service_names, bind)
    gate.registration = registration
    _registrations[server] = registration
    return server, port


def _registration(server: grpc.aio.Server) -> _Registration:
    registration = _registrations.get(server)
    if registration is None:
        raise ValueError("server was not made by build_server")
    return registration


async def start(server: grpc.aio.Server, *, serving: bool = True) -> None:
    """Mark "" and every service SERVING, then start accepting calls.

    ``serving=False``: start NOT_SERVING, answering only health and reflection,
    until ``mark_serving``.
    """
    registration = _registration(server)
    await registration.health.mark(serving)
    registration.accepting = serving
    registration.health.following = serving
    await server.start()


async def mark_serving(server: grpc.aio.Server) -> None:
    """SERVING, accepting every call; from now on health follows ``ready``."""
    registration = _registration(server)
    registration.accepting = True
    registration.health.following = True
    await registration.health.mark(True)


async def stop(server: grpc.aio.Server, grace: float) -> None:
    """NOT_SERVING first so balancers drain, then let in-flight calls finish for ``grace``."""
    await _registration(server).health.enter_graceful_shutdown()
    await server.stop(grace)


async def serve(
    server: grpc.aio.Server,
    *,
    grace: float = 5.0,
    on_stop: Callable[[], Awaitable[None]] | None = None,
    prepare: Callable[[], Awaitable[None]] | None = None,
    stop_requested: asyncio.Event | None = None,
) -> None:
    """Start, run until SIGTERM/SIGINT (or cancellation), then stop gracefully.

    With ``prepare``: start NOT_SERVING, run it (a signal stops it and the
    server), then turn SERVING; what it raises is raised after the stop.
    With ``stop_requested``: stop when it is set instead, leaving the signals
    to the caller (several servers in one process share one event: a loop
    has one handler per signal).
    """
    signals: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
    if stop_requested is None:
        stop_requested = asyncio.Event()
        signals = stopping_on_signals(stop_requested.set)
    try:
        # The signals are ours until the stop begins: a second Ctrl-C then ends it hard.
        with signals:
            await start(server, serving=prepare is None)
            if prepare is not None:
                _log.info(
                    "grpc_preparing",
                    services=list(_registration(server).service_names),
                    say="starting…",
                )
                if not await _unless_stopped(prepare(), stop_requested):
                    return
                await mark_serving(server)
            _log.info(
                "grpc_serving",
                services=list(_registration(server).service_names),
                say=f"ready on {_registration(server).bind}",
            )
            await _until_stopped(server, stop_requested)
    finally:
        _log.info("grpc_stopping", grace_seconds=grace, say="stopping")
        await stop(server, grace)
        if on_stop is not None:
            await on_stop()
        _log.info("grpc_stopped", say="stopped")


async def _until_stopped(server: grpc.aio.Server, stop_requested: asyncio.Event) -> None:
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


async def _unless_stopped(work: Awaitable[None], stop_requested: asyncio.Event) -> bool:
    """Run ``work`` to its end (True; its error is raised) unless a stop comes first (False)."""
    working = asyncio.ensure_future(work)
    signalled = asyncio.ensure_future(stop_requested.wait())
    try:
        await asyncio.wait({working, signalled}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:  # we were cancelled: so is the work
        working.cancel()
        raise
    finally:
        signalled.cancel()
    if not working.done():
        working.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await working
        return False
    working.result()
    return True
