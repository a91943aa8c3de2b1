"""The gateway's HTTP/1.1 connections: uvicorn's h11 protocol, with a deadline for a head.

A request's head (its request line and headers) must arrive whole within
``HEAD_SECONDS`` of the connection opening, or of the previous response ending
on a kept-alive connection, as nginx's ``client_header_timeout``. uvicorn's own
keep-alive timer restarts on every byte, and h11 has no timer at all: a client
sending a header line every ten seconds held its connection, and a file
descriptor, for ever; 21,000 such connections (no account needed) left every
user unanswered. A body has its own bound (``bodies.BODY_SECONDS``).

The gateway serves no WebSockets: a request asking to upgrade (``Upgrade: websocket``, on
any path) is an ordinary HTTP request, answered as any other. uvicorn logged two warnings
for each ("Unsupported upgrade request", "No supported WebSocket library detected"), and
``ws="none"`` does not silence them: it only leaves the upgrade unsupported. Anyone could
fill the log, without signing in. ``server_config`` is the one uvicorn configuration of
the gateway's connections (``main``, and the tests' live server).
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
import structlog
import uvicorn
from starlette.types import ASGIApp
from uvicorn.protocols.http.h11_impl import H11Protocol

HEAD_SECONDS = 10.0

_log = structlog.get_logger(__name__)


class HeadDeadlineProtocol(H11Protocol):
    _head_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._await_head()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_waiting()
        super().connection_lost(exc)

    def _await_head(self) -> None:
        self._stop_waiting()
        if not self.transport.is_closing():
            self._head_deadline = self.loop.call_later(HEAD_SECONDS, self._head_overdue)

    def _should_upgrade(self) -> bool:
        return False  # no WebSockets here, and nothing to warn about (see above)

    def _stop_waiting(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_overdue(self) -> None:
        self._head_deadline = None
        # IDLE: no request head has been read whole since the deadline was set.
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            _log.info("http_head_timeout", seconds=HEAD_SECONDS)
            self.transport.close()


def server_config(app: ASGIApp, **options: Any) -> uvicorn.Config:
    """uvicorn's configuration of the gateway; ``options`` add the rest (bind, grace).

    log_config=None: structlog (``logs.configure_logging``) stays in charge of every line.
    proxy_headers=False: the app believes forwarded headers itself, from
    OPS_GATEWAY_TRUSTED_PROXIES only (uvicorn's own default trusts 127.0.0.1).
    ws="none": no WebSocket library is loaded, should one be installed.
    """
    return uvicorn.Config(
        app,
        http=HeadDeadlineProtocol,
        ws="none",
        log_config=None,
        access_log=False,
        proxy_headers=False,
        **options,
    )
