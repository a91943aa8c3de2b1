"""``opsctl serve gateway``: the gateway app under uvicorn on ``OPS_GATEWAY_BIND``."""

from __future__ import annotations

import structlog
import uvicorn

from durable_ops.gateway.app import create_app
from durable_ops.gateway.backends import Backends
from durable_ops.logs import configure_logging
from durable_ops.settings import Settings, SettingsError


def parse_bind(bind: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:8080`` for IPv6) -> (host, port)."""
    host, sep, port = bind.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise SettingsError(f"OPS_GATEWAY_BIND must be host:port, not {bind!r}")
    return host.strip("[]"), int(port)


def run(settings: Settings) -> None:
    configure_logging(settings, "gateway")
    host, port = parse_bind(settings.gateway_bind)
    app = create_app(settings, Backends.from_settings(settings))
    structlog.get_logger(__name__).info("gateway_serving", bind=settings.gateway_bind)
    # log_config=None: structlog (configured above) stays in charge of every line.
    uvicorn.run(app, host=host, port=port, log_config=None, access_log=False)
