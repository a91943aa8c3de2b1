"""Server-sent events, decoded incrementally: the framing of a streamed chat completion.

The part of the event-stream format (WHATWG HTML, "server-sent events") that
chat-completion servers use: llama.cpp's llama-server, Ollama, vLLM and OpenAI
send one ``data: {chunk}`` line per event, each event ended by a blank line,
and ``data: [DONE]`` last. Lines end in LF, CRLF or CR; one space after the
colon is dropped; the data lines of one event join with LF. Comments (lines
starting with ``:``, keep-alives) and the ``event``, ``id`` and ``retry``
fields are read and otherwise ignored, except that ``event`` names the event.
llama-server reports a failure mid-stream with an ``error: {…}`` line: it
becomes an event named ``error``.

Anything else, and bytes that are not UTF-8, is ``MalformedStream``: a stream
of chat-completion chunks has no other lines, so another line means a broken
server or something that is not one. At the end of the stream an event not
yet ended by its blank line is dropped, as the format says: the stream may
have been cut off in the middle of it.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

_LINE_END = re.compile(r"\r\n|\r|\n")
_IGNORED_FIELDS = frozenset({"id", "retry"})


class MalformedStream(ValueError):
    """The bytes are not an event stream of the kind chat-completion servers send."""


@dataclass(frozen=True)
class Event:
    data: str
    name: str = "message"


class EventDecoder:
    """Feed it the body as it arrives; it returns each event once its blank line came."""

    def __init__(self) -> None:
        self._text = codecs.getincrementaldecoder("utf-8")()
        self._buffer = ""
        self._started = False
        self._name = ""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[Event]:
        try:
            text = self._text.decode(chunk)
        except UnicodeDecodeError:
            raise MalformedStream("the stream is not UTF-8") from None
        return self._lines(text, final=False)

    def close(self) -> list[Event]:
        """The stream ended: the events its last bytes completed (a final CR ends a line)."""
        try:
            text = self._text.decode(b"", final=True)
        except UnicodeDecodeError:
            raise MalformedStream("the stream is not UTF-8") from None
        events = self._lines(text, final=True)
        self._buffer, self._name, self._data = "", "", []  # an event cut off: dropped
        return events

    def _lines(self, text: str, *, final: bool) -> list[Event]:
        if not self._started and text:
            self._started = True
            text = text.removeprefix("\ufeff")  # the format allows one byte-order mark
        self._buffer += text
        events: list[Event] = []
        start = 0
        for match in _LINE_END.finditer(self._buffer):
            if match.group() == "\r" and match.end() == len(self._buffer) and not final:
                break  # the LF of a CRLF may be in the next chunk
            events += self._line(self._buffer[start : match.start()])
            start = match.end()
        self._buffer = self._buffer[start:]
        return events

    def _line(self, line: str) -> list[Event]:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return []
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._name = value
        elif name == "error":
            self._name = "error"
            self._data.append(value)
        elif name not in _IGNORED_FIELDS:
            raise MalformedStream("the stream has a line that is not an event field")
        return []

    def _dispatch(self) -> list[Event]:
        data, name = self._data, self._name
        self._data, self._name = [], ""
        if not data:
            return []
        return [Event("\n".join(data), name or "message")]
