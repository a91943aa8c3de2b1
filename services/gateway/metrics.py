"""Request count and latency by route template and status, Prometheus format.

Served on its own bind (``OPS_GATEWAY_METRICS_BIND``, ``gateway.main``), never
on the port users reach: route names, volumes and error rates are the
operator's. Each app has its own ``CollectorRegistry`` (tests build many
apps). Labels use the route template (``/api/operations/{id}``), never the
raw path, and the method is one of HTTP's own (any other is ``other``), so ids,
probes of unknown paths and made-up methods cannot grow the label set.
"""

from __future__ import annotations

import time

import structlog
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.exposition import generate_latest
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

UNMATCHED = "unmatched"
# The request line's method is whatever the client wrote (``curl -X BAZ123``): the
# label takes RFC 9110's methods and PATCH, and files every other under one value.
METHODS = frozenset(
    {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"}
)
OTHER_METHOD = "other"
_log = structlog.get_logger(__name__)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "durable_ops_gateway_http_requests",
            "HTTP requests answered, by method, route template and status",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "durable_ops_gateway_http_request_duration_seconds",
            "HTTP request latency, by method, route template and status",
            ["method", "route", "status"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        method = method if method in METHODS else OTHER_METHOD
        labels = {"method": method, "route": route, "status": str(status)}
        self.requests.labels(**labels).inc()
        self.latency.labels(**labels).observe(seconds)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def route_template(scope: Scope) -> str:
    route = scope.get("route")
    if isinstance(route, Mount):
        return route.path + "/{path}"
    if isinstance(route, Route):
        return route.path
    return UNMATCHED


class MetricsMiddleware:
    """Times every HTTP request; an exception escaping the app counts as a 500."""

    def __init__(self, app: ASGIApp, metrics: GatewayMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_with_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_with_status)
        finally:
            seconds = time.perf_counter() - started
            route = route_template(scope)
            self.metrics.observe(scope["method"], route, status, seconds)
            _log.debug(
                "http_request",
                method=scope["method"],
                route=route,
                status=status,
                duration_ms=round(seconds * 1000, 1),
            )
