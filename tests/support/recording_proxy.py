"""A pass-through HTTP proxy in front of a model server that keeps what it answered.

The real-model test puts it between the worker and llama-server, so the usage
llama-server itself reported (the last chunks of each streamed completion) can
be compared with what the product recorded, read from the server's own bytes
rather than from anything the product parsed. It forwards each request as it
came and each response as it streams (chunk by chunk, so progress still
streams), closing the connection at the end of a response.
"""

from __future__ import annotations

import http.client
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length"}


@dataclass
class Exchange:
    path: str
    status: int
    body: bytearray = field(default_factory=bytearray)

    def events(self) -> list[dict[str, Any]]:
        """The JSON ``data:`` events of a streamed answer (``[DONE]`` left out)."""
        found = []
        for block in self.body.decode().split("\n\n"):
            data = block.strip().removeprefix("data: ")
            if block.strip().startswith("data: ") and data != "[DONE]":
                found.append(json.loads(data))
        return found

    def reported(self, name: str) -> dict[str, Any]:
        """The last ``name`` object (``usage``, ``timings``) the server sent in the stream."""
        given = [event[name] for event in self.events() if isinstance(event.get(name), dict)]
        assert given, f"the server sent no {name} in its answer"
        last: dict[str, Any] = given[-1]
        return last


class RecordingProxy:
    """Forwards to ``upstream`` (``http://host:port``); ``exchanges`` keeps each answer."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self._upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.exchanges: list[Exchange] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # the end of a response is the end of its connection

            def do_GET(self) -> None:
                proxy._forward(self, b"")

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                proxy._forward(self, self.rfile.read(length))

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def completions(self) -> list[Exchange]:
        return [found for found in self.exchanges if found.path.endswith("/chat/completions")]

    def _forward(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        upstream = http.client.HTTPConnection(*self._upstream, timeout=600)
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in _HOP_BY_HOP}
        upstream.request(handler.command, handler.path, body=body, headers=headers)
        response = upstream.getresponse()
        exchange = Exchange(handler.path, response.status)
        handler.send_response(response.status)
        for name, value in response.getheaders():
            if name.lower() not in _HOP_BY_HOP:
                handler.send_header(name, value)
        handler.end_headers()
        while chunk := response.read1(65536):
            exchange.body += chunk
            handler.wfile.write(chunk)
            handler.wfile.flush()
        upstream.close()
        self.exchanges.append(exchange)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)
