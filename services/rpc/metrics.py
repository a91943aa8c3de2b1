"""Prometheus metrics of a gRPC process: one registry, the server interceptor, ``/metrics``.

Every process builds one ``CollectorRegistry`` (tests build many servers in one
process, so nothing registers globally) and hands it to what counts: the
interceptor here counts every call by full method name and status code, the
services add their domain metrics. All names start with ``durable_ops_``.
Labels are bounded: method names come from the registered services (an
unknown method is answered UNIMPLEMENTED by gRPC before it reaches a
handler), never ids.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import time
from collections.abc import AsyncIterator, Callable
from threading import Lock, Thread
from typing import Any, Generic, TypeVar
from wsgiref.simple_server import WSGIServer

import grpc
import prometheus_client
import structlog
from prometheus_client import CollectorRegistry, Counter, Histogram

from durable_ops.rpc.handlers import SwappingInterceptor, behaviour_of, handler_like
from durable_ops.settings import SettingsError

PREFIX = "durable_ops_"
T = TypeVar("T")
LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

_log = structlog.get_logger(__name__)


class GrpcServerMetrics:
    """Requests and latency of one process's gRPC server, by full method name (and code)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.requests = Counter(
            f"{PREFIX}grpc_server_requests",
            "gRPC calls answered, by full method name and status code",
            ["method", "code"],
            registry=registry,
        )
        self.duration = Histogram(
            f"{PREFIX}grpc_server_request_duration_seconds",
            "gRPC call duration until the status was sent, by full method name",
            ["method"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self._counted: dict[tuple[str, grpc.StatusCode], Counter] = {}
        self._timed: dict[str, Histogram] = {}

    def observe(self, method: str, code: grpc.StatusCode, seconds: float) -> None:
        # Each labelled child looked up once: ``labels()`` validates and locks every time.
        counted = self._counted.get((method, code))
        if counted is None:
            counted = self._counted[method, code] = self.requests.labels(method, code.name)
        timed = self._timed.get(method)
        if timed is None:
            timed = self._timed[method] = self.duration.labels(method)
        counted.inc()
        timed.observe(seconds)


def _code(context: Any, error: BaseException | None) -> grpc.StatusCode:
    """The status the call ended with: what the servicer set or aborted with, else by ``error``."""
    code = context.code()
    if isinstance(code, int):  # grpc.aio reports the raw number on some paths
        code = next((member for member in grpc.StatusCode if member.value[0] == code), None)
    if isinstance(code, grpc.StatusCode) and (code != grpc.StatusCode.OK or error is None):
        return code
    if error is None:
        return grpc.StatusCode.OK
    if isinstance(error, asyncio.CancelledError):
        # gRPC cancels the handler both when the client goes away (or the server stops)
        # and when the call's deadline passes; the latter is the server being too slow
        # (a write waiting out a lock), which an alert on server errors must see.
        if _deadline_passed(context):
            return grpc.StatusCode.DEADLINE_EXCEEDED
        return grpc.StatusCode.CANCELLED
    return grpc.StatusCode.UNKNOWN


# A client whose deadline passes cancels the call itself, and its cancel reaches the
# server about when the server's own copy of the deadline (started on receipt) runs out,
# before or after it: a call cancelled this close to its deadline counts as past it.
DEADLINE_SLACK_SECONDS = 0.5


def _deadline_passed(context: Any) -> bool:
    try:
        remaining = context.time_remaining()
    except Exception:  # a context that cannot say: count the call as the client's cancel
        return False
    return remaining is not None and remaining <= DEADLINE_SLACK_SECONDS


class MetricsInterceptor(SwappingInterceptor):
    """Times every call the server answers (rejections by later interceptors included)."""

    def __init__(self, metrics: GrpcServerMetrics) -> None:
        super().__init__()
        self._metrics = metrics

    def swap(self, method: str, handler: Any) -> Any:
        # A streaming answer is an async generator, or a coroutine that calls context.write.
        behaviour = behaviour_of(handler)
        if inspect.isasyncgenfunction(behaviour):
            return handler_like(handler, self._streaming(method, behaviour))
        return handler_like(handler, self._unary(method, behaviour))

    def _unary(self, method: str, behaviour: Callable[..., Any]) -> Callable[..., Any]:
        async def timed(request: Any, context: Any) -> Any:
            started = time.perf_counter()
            error: BaseException | None = None
            try:
                return await behaviour(request, context)
            except BaseException as exc:
                error = exc
                raise
            finally:
                self._metrics.observe(method, _code(context, error), time.perf_counter() - started)

        return timed

    def _streaming(self, method: str, behaviour: Callable[..., Any]) -> Callable[..., Any]:
        async def timed(request: Any, context: Any) -> AsyncIterator[Any]:
            started = time.perf_counter()
            error: BaseException | None = None
            try:
                async for reply in behaviour(request, context):
                    yield reply
            except BaseException as exc:
                error = exc
                raise
            finally:
                self._metrics.observe(method, _code(context, error), time.perf_counter() - started)

        return timed


class MetricsServer:
    """``/metrics`` of one registry over HTTP, in a daemon thread (prometheus_client's own)."""

    def __init__(self, server: WSGIServer, thread: Thread) -> None:
        self._server = server
        self._thread = thread

    @property
    def port(self) -> int:
        return int(self._server.server_port)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def serve_metrics(bind: str, registry: CollectorRegistry, *, setting: str) -> MetricsServer:
    """Serve ``registry`` at ``http://bind/metrics``; ``setting`` names the variable in errors."""
    host, _, port = bind.rpartition(":")
    if not host or not port.isdigit():
        raise SettingsError(f"{setting} must be host:port, not {bind!r}")
    server, thread = prometheus_client.start_http_server(
        int(port), addr=host.strip("[]"), registry=registry
    )
    metrics = MetricsServer(server, thread)
    _log.info("metrics_serving", bind=bind, port=metrics.port)
    return metrics


class CachedReading(Generic[T]):
    """The answer of ``read`` for ``seconds``: scrapes from several Prometheus servers, or a
    fast scrape interval, cost one query per period. A failed read keeps the last answer
    (``None`` before the first), so a database hiccup leaves gaps, not errors."""

    def __init__(self, read: Callable[[], T], seconds: float, clock: Callable[[], float]) -> None:
        self._read = read
        self._seconds = seconds
        self._clock = clock
        self._lock = Lock()
        self._value: T | None = None
        self._read_at = -math.inf

    def get(self) -> T | None:
        with self._lock:
            now = self._clock()
            if now - self._read_at >= self._seconds:
                try:
                    self._value = self._read()
                except Exception as exc:  # a scrape must not fail with the database away
                    _log.warning("metrics_read_failed", error=type(exc).__name__)
                self._read_at = now  # failed or not: do not retry on every scrape
            return self._value


def serve_metrics_if(
    bind: str, registry: CollectorRegistry, *, setting: str
) -> MetricsServer | None:
    """``serve_metrics`` when ``bind`` is set (an empty setting turns the endpoint off)."""
    return serve_metrics(bind, registry, setting=setting) if bind else None
