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
) -> AsyncIterator[bytes]:
    """The event stream of ``content``, taking ``seconds`` from first chunk to finish.

    ``prompt`` is the prompt's tokens, ``prompt_ms`` the time it took to read it and
    work out the answer; ``include_usage`` sends the usage chunk.
    """
    loop = asyncio.get_running_loop()
    start = loop.time()

    async def until(offset: float) -> None:
        wait = start + offset - loop.time()
        if wait > 0:
            await asyncio.sleep(wait)

    parts = pieces(content)
    yield completion.chunk({"role": "assistant"})
    for index, part in enumerate(parts):
        await until(seconds * index / len(parts))
        yield completion.chunk({"content": part})
    await until(seconds)
    spent = timings(prompt, prompt_ms, len(parts), (loop.time() - start) * 1000)
    if include_usage:
        yield completion.chunk({}, "stop")
        yield completion.chunk(None, usage=usage(prompt, len(parts)), timings=spent)
    else:
        yield completion.chunk({}, "stop", timings=spent)
    yield DONE
