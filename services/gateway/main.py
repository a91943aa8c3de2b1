"""``opsctl serve gateway``: the gateway app under uvicorn on ``OPS_GATEWAY_BIND``, and its
metrics on ``OPS_GATEWAY_METRICS_BIND`` when set. SIGTERM or SIGINT stops it
(``stopping``): its streams and long-polls end at once, and it exits."""

from __future__ import annotations

import contextlib
import sys

import structlog
from uvicorn.config import STARTUP_FAILURE

from durable_ops.gateway.app import create_app
from durable_ops.gateway.backends import Backends
from durable_ops.gateway.connections import server_config
from durable_ops.gateway.hosts import parse_bind
from durable_ops.gateway.stopping import STOP_GRACE_SECONDS, GatewayServer
from durable_ops.logs import configure_logging
from durable_ops.rpc.metrics import serve_metrics_if
from durable_ops.settings import Settings


def run(settings: Settings) -> None:
    configure_logging(settings, "gateway")
    host, port = parse_bind(settings.gateway_bind)
    app = create_app(settings, Backends.from_settings(settings))
    serve_metrics_if(
        settings.gateway_metrics_bind,
        app.state.metrics.registry,
        setting="OPS_GATEWAY_METRICS_BIND",
    )
    structlog.get_logger(__name__).info(
        "gateway_serving",
        bind=settings.gateway_bind,
        say=f"ready on http://{settings.gateway_bind}/",
    )
    config = server_config(app, host=host, port=port, timeout_graceful_shutdown=STOP_GRACE_SECONDS)
    server = GatewayServer(config, app.state.draining)
    # After its graceful stop uvicorn raises the signal that stopped it again, for the
    # handler it had replaced; a SIGINT then reaches asyncio's runner as KeyboardInterrupt
    # if the serving task has not quite returned. The stop is done: that is no error.
    with contextlib.suppress(KeyboardInterrupt):
        server.run()
    if not server.started:
        sys.exit(STARTUP_FAILURE)  # as ``uvicorn.run``: its log line says why
