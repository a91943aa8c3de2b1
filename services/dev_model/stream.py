"""The streamed form of a development-model answer, as llama-server sends one.

``pieces`` cuts the answer's text into token-sized pieces: a word of up to six
letters with the space before it, a run of up to three punctuation marks
(``": "`` is one), a run of whitespace. Joined, they are the text again,
character for character. ``events`` sends them as OpenAI ``chat.completion.chunk``
server-sent events, as llama-server does: a first chunk with the assistant role,
one chunk per piece, a chunk with ``finish_reason``, then (when the request asked
for ``stream_options.include_usage``) one with ``usage`` and no choices, then
``data: [DONE]``, spread evenly over ``seconds``: the first piece at once, the
finish when the time is up.

Asked to report the prompt's reading (``"return_progress": true``), it reads the
prompt first, as llama-server does, and says how far it has got as llama-server
does: chunks with the assistant role, no content and ``prompt_progress``
(``total``, ``cache``, ``processed``, ``time_ms``), the first at once with nothing
read, then one every ``READ_BATCH`` pieces, the last with all of them. The reading
takes its part of ``seconds``: a prompt piece is read ``READ_SPEEDUP`` times faster
than an answer piece is written (Gemma 3 270M on CPU: about 5 ms against 25 ms), and
the answer's pieces are spread over the rest.

The counts are honest: the prompt is counted in the same pieces as the answer
(``prompt_tokens``), ``completion_tokens`` is the number of chunks with content
it sent, and the last chunk's ``timings`` (llama-server's ``prompt_ms`` and
``predicted_ms``) are the times it measured: working out the answer, then
sending it.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

_PIECE = re.compile(r" ?\w{1,6}| ?[^\w\s]{1,3}|\s+")
DONE = b"data: [DONE]\n\n"
READ_BATCH = 8  # prompt pieces a report of the reading (llama-server: 2,048 tokens)
READ_SPEEDUP = 5  # a prompt piece is read five times faster than an answer piece is written


def pieces(text: str) -> list[str]:
    """``text`` in token-sized pieces that join to exactly ``text``."""
    return _PIECE.findall(text)


@dataclass(frozen=True)
class Completion:
    """What every chunk of one completion repeats."""

    id: str
    created: int
    model: str

    def chunk(
        self,
        delta: dict[str, str] | None,
        finish_reason: str | None = None,
        **extra: Any,
    ) -> bytes:
        """One chunk; ``delta`` None: a chunk with no choices (the usage chunk)."""
        choices = (
            [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish_reason}]
        )
        body: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": choices,
            **extra,
        }
        return b"data: " + json.dumps(body, ensure_ascii=False).encode() + b"\n\n"


def prompt_tokens(texts: list[str]) -> int:
    """The prompt's tokens, counted in the pieces its answers are counted in."""
    return sum(len(pieces(text)) for text in texts)


def usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def reading_seconds(prompt: int, completion: int, seconds: float) -> float:
    """The part of ``seconds`` that reading ``prompt`` pieces takes before ``completion``."""
    work = prompt + READ_SPEEDUP * completion
    return seconds * prompt / work if work else 0.0


def prompt_progress(total: int, processed: int, milliseconds: float) -> dict[str, Any]:
    """llama-server's report of how far it has read the prompt (nothing cached here)."""
    return {"total": total, "cache": 0, "processed": processed, "time_ms": round(milliseconds)}


def timings(prompt: int, prompt_ms: float, completion: int, predicted_ms: float) -> dict[str, Any]:
    """llama-server's ``timings`` object: the times as this model measured them."""
    return {
        "prompt_n": prompt,
        "prompt_ms": prompt_ms,
        "predicted_n": completion,
        "predicted_ms": predicted_ms,
    }


async def events(
    completion: Completion,
    content: str,
    prompt: int,
    seconds: float,
    *,
    prompt_ms: float = 0.0,
    include_usage: bool = False,
    report_reading: bool = False,
) -> AsyncIterator[bytes]:
    """The event stream of ``content``, taking ``seconds`` from first chunk to finish.

    ``prompt`` is the prompt's tokens, ``prompt_ms`` the time it took to work out the
    answer; ``include_usage`` sends the usage chunk; ``report_reading`` reads the
    prompt first, reporting how far (``prompt_progress``), within ``seconds``.
    """
    loop = asyncio.get_running_loop()
    start = loop.time()

    async def until(offset: float) -> None:
        wait = start + offset - loop.time()
        if wait > 0:
            await asyncio.sleep(wait)

    parts = pieces(content)
    reading = reading_seconds(prompt, len(parts), seconds) if report_reading else 0.0
    if report_reading:
        for processed in [*range(0, prompt, READ_BATCH), prompt]:
            await until(reading * processed / prompt if prompt else 0.0)
            read_ms = (loop.time() - start) * 1000
            report = prompt_progress(prompt, processed, read_ms)
            yield completion.chunk({"role": "assistant"}, prompt_progress=report)
        await until(reading)
    answering = loop.time()
    yield completion.chunk({"role": "assistant"})
    for index, part in enumerate(parts):
        await until(reading + (seconds - reading) * index / len(parts))
        yield completion.chunk({"content": part})
    await until(seconds)
    predicted_ms = (loop.time() - answering) * 1000
    prompt_ms += (answering - start) * 1000  # the reading, where there was one
    spent = timings(prompt, prompt_ms, len(parts), predicted_ms)
    if include_usage:
        yield completion.chunk({}, "stop")
        yield completion.chunk(None, usage=usage(prompt, len(parts)), timings=spent)
    else:
        yield completion.chunk({}, "stop", timings=spent)
    yield DONE
