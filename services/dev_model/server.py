"""Serving the development model over HTTP with uvicorn."""

from __future__ import annotations

import uvicorn

from durable_ops.dev_model.app import DEFAULT_MODEL, create_app


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


def run(bind: str, *, model: str = DEFAULT_MODEL, seconds: float = 0.0) -> None:
    """Serve until interrupted (uvicorn handles SIGINT and SIGTERM).

    ``seconds`` is how long one completion takes (``DevModelConfig.delay_seconds``).
    """
    host, port = parse_bind(bind)
    uvicorn.run(
        create_app(model=model, delay_seconds=seconds),
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=5,
    )
