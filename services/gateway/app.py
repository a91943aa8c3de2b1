"""``create_app(settings, backends)``: the gateway's ASGI application.

The app is the sum of route modules (see ``durable_ops.gateway.modules``): the
core ones below plus any passed as ``modules=``, and the web pages (core
ones plus ``pages=``). Shared pieces a new module imports:

* ``auth.require_user`` / ``calls.owner_calls`` — the authenticated caller, and
  backend calls in its owner scope with errors translated once;
* ``problems.Problem`` / ``problems.invalid`` — problem+json answers;
* ``pagination``, ``bodies``, ``ids`` — query strings, JSON bodies, path ids;
* ``context`` — the settings and backends of the running app;
* ``dto`` — Operation/Notification shapes and RFC 3339 times;
* ``openapi`` — helpers to write ``openapi_paths`` and the shared schemas.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import structlog
from starlette.applications import Starlette
from starlette.middleware import Middleware
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from durable_ops import telemetry
from durable_ops.gateway import (
    ai,
    console,
    devlogin,
    events,
    health,
    login,
    metrics,
    notifications,
    openapi,
    operations,
    standing,
    workspace,
)
from durable_ops.gateway.backends import Backends
from durable_ops.gateway.headers import SecurityHeadersMiddleware
from durable_ops.gateway.hosts import (
    AllowedHostsMiddleware,
    allowed_hosts,
    dev_login_refusal,
    serves_dev_login,
)
from durable_ops.gateway.limits import ConcurrencyLimit
from durable_ops.gateway.modules import RouteModule
from durable_ops.gateway.problems import EXCEPTION_HANDLERS
from durable_ops.gateway.stopping import Draining
from durable_ops.gateway.web import CORE_PAGES, Page, Renderer, web_module
from durable_ops.gateway.web import EXCEPTION_HANDLERS as WEB_EXCEPTION_HANDLERS
from durable_ops.settings import Settings

CORE_MODULES: tuple[RouteModule, ...] = (
    operations,
    events,
    notifications,
    workspace,
    ai,
    login,
    console,
    health,
    openapi,
)


def create_app(
    settings: Settings,
    backends: Backends,
    *,
    modules: Sequence[RouteModule] = (),
    pages: Sequence[Page] = (),
) -> Starlette:
    """The gateway: core route modules, then ``modules``, then the web pages.

    Dev-login is mounted only where ``hosts.serves_dev_login`` allows it.
    """
    all_pages = (*CORE_PAGES, *pages)
    dev = [devlogin] if serves_dev_login(settings) else []
    all_modules: list[RouteModule] = [*CORE_MODULES, *dev, *modules, web_module(all_pages)]
    gateway_metrics = metrics.GatewayMetrics()

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await backends.close()

    app = Starlette(
        routes=[route for module in all_modules for route in module.routes],
        # Outermost first: the peer's forwarded headers are judged on the raw connection;
        # a refused Host is counted and carries the security headers like any answer; a
        # refused credential whose check ran beside the route replaces the route's answer.
        middleware=[
            Middleware(
                ProxyHeadersMiddleware, trusted_hosts=settings.gateway_trusted_proxy_networks
            ),
            Middleware(metrics.MetricsMiddleware, metrics=gateway_metrics),
            Middleware(SecurityHeadersMiddleware),
            Middleware(AllowedHostsMiddleware, hosts=allowed_hosts(settings)),
            Middleware(standing.CheckBeforeAnswering),
        ],
        exception_handlers={**EXCEPTION_HANDLERS, **WEB_EXCEPTION_HANDLERS},
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.backends = backends
    app.state.metrics = gateway_metrics
    app.state.renderer = Renderer(all_pages)
    app.state.openapi = openapi.build_document(all_modules)
    app.state.long_polls = ConcurrencyLimit(
        settings.gateway_long_polls_per_user, retry_after=operations.WAIT_RETRY_AFTER_SECONDS
    )
    app.state.stream_signals = events.StreamSignals()
    app.state.draining = Draining()  # begun by ``stopping.GatewayServer``
    app.state.sign_in_throttle = login.sign_in_throttle()
    refusal = dev_login_refusal(settings)
    if refusal is not None:
        structlog.get_logger(__name__).warning("dev_login_refused", reason=refusal)
    # Accepts and answers W3C traceparent while tracing is on; nothing otherwise.
    telemetry.instrument_app(app)
    return app
