"""A minimal keep-alive HTTP/1.1 GET client for load generation.

Figure 4 compares the gateway with a direct gRPC call, and both clients run in
the benchmark's process on the same two cores as the servers. grpc.aio's
client is C-core; httpx spends about 5 ms of CPU per request here, more than
the gateway itself (about 2 ms), so with httpx the figure measured mostly the
load generator. This client does what ``wrk`` does per request: write one
request on a kept-alive connection, read the status line, headers and a
``Content-Length`` body.
"""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import urlsplit


class HttpGetter:
    """One kept-alive connection; ``get`` returns (status, body)."""

    def __init__(self, base_url: str, headers: dict[str, str]) -> None:
        parts = urlsplit(base_url)
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or 80
        fixed = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        self._headers = f"Host: {self._host}:{self._port}\r\n{fixed}"
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def get(self, path: str) -> tuple[int, bytes]:
        request = f"GET {path} HTTP/1.1\r\n{self._headers}\r\n".encode("latin-1")
        try:
            return await self._exchange(request)
        except (asyncio.IncompleteReadError, ConnectionError):
            # The server closed an idle kept-alive connection (uvicorn: after 5 s): reconnect once.
            await self.close()
            return await self._exchange(request)

    async def _exchange(self, request: bytes) -> tuple[int, bytes]:
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self._host, self._port)
        assert self._reader is not None
        self._writer.write(request)
        head = await self._reader.readuntil(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        length = 0
        for line in header_lines:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        body = await self._reader.readexactly(length)
        return int(status_line.split(" ", 2)[1]), body

    async def close(self) -> None:
        writer, self._reader, self._writer = self._writer, None, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
