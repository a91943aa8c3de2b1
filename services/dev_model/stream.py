"""The streamed form of a development-model answer, as llama-server sends one.

``pieces`` cuts the answer's text into token-sized pieces: a word of up to six
letters with the space before it, a run of up to three punctuation marks
(``": "`` is one), a run of whitespace. Joined, they are the text again,
character for character. ``events`` sends them as OpenAI ``chat.completion.chunk``
server-sent events: a first chunk with the assistant role, one chunk per
piece, a last chunk with ``finish_reason`` and ``usage``, then ``data: [DONE]``,
spread evenly over ``seconds``: the first piece at once, the last chunk when
the time is up.
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
        delta: dict[str, str],
        finish_reason: str | None = None,
        usage: dict[str, int] | None = None,
    ) -> bytes:
        body: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        }
        if usage is not None:
            body["usage"] = usage
        return b"data: " + json.dumps(body, ensure_ascii=False).encode() + b"\n\n"


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


async def events(
    completion: Completion, content: str, prompt_tokens: int, seconds: float
) -> AsyncIterator[bytes]:
    """The event stream of ``content``, taking ``seconds`` from first chunk to last."""
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
    yield completion.chunk({}, "stop", usage(prompt_tokens, len(parts)))
    yield DONE
