"""The gateway's stop: its event streams and long-polls end at once, then the process exits.

uvicorn (0.55, ``Server.shutdown``) stops by closing its listening sockets and
asking each connection to close once its response is complete (an idle one
closes; a busy one is only marked not to be kept alive); then it waits for
every connection to close, for ``timeout_graceful_shutdown`` seconds or for
ever, and only then runs the lifespan's shutdown. No response is told: an
event stream, which never ends by itself, held a stopped gateway alive, its
port already closed, for as long as a tab stayed open (65 s in the report,
where ``opsctl up`` restarts a gateway only once it has exited), and a
long-poll for up to its 30 s.

``GatewayServer`` tells ``Draining`` as the stop begins, before uvicorn waits
(the lifespan's shutdown would come too late): each open stream ends cleanly,
so the browser's EventSource reconnects, to the gateway that replaces this one,
resuming after its ``Last-Event-ID`` (``events``); each long-poll answers as at
its timeout (``operations``). A request that still runs after
``STOP_GRACE_SECONDS`` is cancelled by uvicorn.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from contextlib import contextmanager

import structlog
import uvicorn

# How long a request still running when the stop begins (a backend call, a client slow to
# read its answer) may take to finish before it is cancelled: the 5 s the gRPC services
# give theirs (``rpc.server.serve``), well within the 10 s ``opsctl up`` waits before it
# kills a child (``stack.children.STOP_GRACE_SECONDS``), so the gateway always ends
# itself. Streams and long-polls do not wait for it: they end as the stop begins.
STOP_GRACE_SECONDS = 5

_log = structlog.get_logger(__name__)


class Draining:
    """Whether this gateway is stopping, told to each open stream and long-poll."""

    def __init__(self) -> None:
        self.begun = False
        # One event per watcher, made in its own loop (tests run an app in several loops).
        self._watchers: set[asyncio.Event] = set()

    def begin(self) -> None:
        self.begun = True
        for stopping in self._watchers:
            stopping.set()

    @contextmanager
    def watching(self) -> Iterator[asyncio.Event]:
        """An event set once the stop begins; already set when it has."""
        stopping = asyncio.Event()
        if self.begun:
            stopping.set()
        self._watchers.add(stopping)
        try:
            yield stopping
        finally:
            self._watchers.discard(stopping)


class GatewayServer(uvicorn.Server):
    """uvicorn's server, which tells ``draining`` as its stop begins."""

    def __init__(self, config: uvicorn.Config, draining: Draining) -> None:
        super().__init__(config)
        self._draining = draining

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        _log.info(
            "gateway_stopping",
            grace_seconds=self.config.timeout_graceful_shutdown,
            say="stopping",
        )
        self._draining.begin()
        await super().shutdown(sockets)
        _log.info("gateway_stopped", say="stopped")
