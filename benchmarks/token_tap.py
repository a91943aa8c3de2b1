"""A TCP relay between the AI worker and the model server that stamps every token.

The worker is pointed at the tap (``OPS_AI_LOCAL_URL``), the tap at the model
server; the bytes pass unchanged in both directions. On the way back it reads
the ``data: {chunk}`` events of each streamed chat completion and records, for
every chunk carrying text, the time its bytes came off the model server's
socket and the answer's text up to and including it: the moment a token left
the model server, as the benchmark sees it, with no hook in the server. The
last ``timings`` and ``usage`` objects the server sent with an answer are kept
too (llama-server's own ``predicted_per_second``, its token counts).

Each event of a streamed answer is one ``yield`` of the server's response and
so one HTTP chunk, never cut by the chunk framing: the events are found in the
raw bytes without decoding the framing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from dataclasses import dataclass, field
from typing import Any

_EVENT = re.compile(rb"data: ([^\n]*)\n\n")
READ_BYTES = 65536


@dataclass
class Completion:
    """One streamed answer: ``tokens[k]`` is (when chunk k left the model, the text so far)."""

    tokens: list[tuple[float, str]] = field(default_factory=list)
    done: bool = False
    # The last ``timings`` (llama-server's) and ``usage`` objects sent with the answer.
    timings: dict[str, Any] | None = None
    usage: dict[str, Any] | None = None

    def add(self, at: float, piece: str) -> None:
        text = (self.tokens[-1][1] if self.tokens else "") + piece
        self.tokens.append((at, text))


class TokenTap:
    """``async with TokenTap(upstream_port) as tap``: listens on ``tap.port``."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self._upstream = (upstream_host, upstream_port)
        self._server: asyncio.Server | None = None
        self._relays: set[asyncio.Task[None]] = set()
        self.completions: list[Completion] = []
        self.port = 0

    async def __aenter__(self) -> TokenTap:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._server is not None:
            self._server.close()
        for relay in list(self._relays):
            relay.cancel()
        if self._relays:
            await asyncio.gather(*self._relays, return_exceptions=True)

    async def _accept(
        self, client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._relays.add(task)
        try:
            upstream_in, upstream_out = await asyncio.open_connection(*self._upstream)
            asking = asyncio.ensure_future(_pipe(client_in, upstream_out))
            try:
                await self._answer(upstream_in, client_out)
            finally:
                asking.cancel()
                upstream_out.close()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            client_out.close()
            self._relays.discard(task)

    async def _answer(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        """Relay the model server's bytes, stamping each chunk event as it is read."""
        reader = AnswerReader(self.completions)
        while chunk := await source.read(READ_BYTES):
            at = time.perf_counter()
            sink.write(chunk)
            reader.feed(chunk, at)
            await sink.drain()


class AnswerReader:
    """The streamed answers of one connection, from its response bytes as they come."""

    def __init__(self, completions: list[Completion]) -> None:
        self._completions = completions
        self._buffer = b""
        self._current: Completion | None = None

    def feed(self, chunk: bytes, at: float) -> None:
        """Bytes read at ``at``: every chunk event they complete is stamped with it."""
        self._buffer += chunk
        end = 0
        for event in _EVENT.finditer(self._buffer):
            end = event.end()
            self._take(event.group(1), at)
        self._buffer = self._buffer[end:]

    def _take(self, data: bytes, at: float) -> None:
        if data == b"[DONE]":
            if self._current is not None:
                self._current.done = True
            self._current = None
            return
        with contextlib.suppress(ValueError, KeyError, IndexError, TypeError):
            event = json.loads(data)
            self._note(event)
            delta = event["choices"][0]["delta"]
            if self._current is None:
                self._current = Completion()
                self._completions.append(self._current)
            piece = delta.get("content")
            if isinstance(piece, str) and piece:
                self._current.add(at, piece)

    def _note(self, event: Any) -> None:
        """The server's ``timings`` and ``usage``, on whichever chunk carries them (the
        usage chunk has no choices): kept on the answer under way."""
        if not isinstance(event, dict) or self._current is None:
            return
        for name in ("timings", "usage"):
            value = event.get(name)
            if isinstance(value, dict):
                setattr(self._current, name, value)


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError):
        while chunk := await source.read(READ_BYTES):
            sink.write(chunk)
            await sink.drain()
    with contextlib.suppress(OSError):
        sink.write_eof()
