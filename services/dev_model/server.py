"""Serving the development model over HTTP with uvicorn.

It says what it serves once it listens (``dev_model_serving``: the bind and the model's
name) and when it stops (``dev_model_stopping``, ``dev_model_stopped``), as every other
process does, through the structlog set-up ``opsctl serve`` made.
"""

from __future__ import annotations

import contextlib
import socket
import sys

import structlog
import uvicorn
from uvicorn.config import STARTUP_FAILURE

from durable_ops.dev_model.app import DEFAULT_MODEL, create_app

STOP_GRACE_SECONDS = 5

_log = structlog.get_logger(__name__)


def parse_bind(bind: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` for IPv6) as (host, port)."""
    host, separator, port_text = bind.rpartition(":")
    if not separator or not host or not port_text.isdigit():
        raise ValueError(f"bind must be host:port, not {bind!r}")
    port = int(port_text)
    if not 0 <= port <= 65535:
        raise ValueError(f"port out of range in {bind!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"write an IPv6 host in brackets: {bind!r}")
    return host, port


class _DevModelServer(uvicorn.Server):
    """uvicorn's server, which logs its start once it listens, and its stop."""

    def __init__(self, config: uvicorn.Config, bind: str, model: str) -> None:
        super().__init__(config)
        self._bind = bind
        self._model = model

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            _log.info(
                "dev_model_serving",
                bind=self._bind,
                model=self._model,
                say=f"ready on http://{self._bind}/v1 (model {self._model})",
            )

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        _log.info("dev_model_stopping", grace_seconds=STOP_GRACE_SECONDS, say="stopping")
        await super().shutdown(sockets)
        _log.info("dev_model_stopped", say="stopped")


def run(bind: str, *, model: str = DEFAULT_MODEL, seconds: float = 0.0) -> None:
    """Serve until interrupted (uvicorn handles SIGINT and SIGTERM).

    ``seconds`` is how long one completion takes (``DevModelConfig.delay_seconds``).
    """
    host, port = parse_bind(bind)
    config = uvicorn.Config(
        create_app(model=model, delay_seconds=seconds),
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=STOP_GRACE_SECONDS,
    )
    server = _DevModelServer(config, bind, model)
    # As ``uvicorn.run``: a SIGINT re-raised after the graceful stop is no error.
    with contextlib.suppress(KeyboardInterrupt):
        server.run()
    if not server.started:
        sys.exit(STARTUP_FAILURE)  # as ``uvicorn.run``: its log line says why
