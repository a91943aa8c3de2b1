"""The answer a running attempt has written so far (issue 39): its size bound. Pure.

A model answer is at most ``MAX_ANSWER_TOKENS`` tokens; a token is rarely more
than a few bytes of UTF-8, so eight bytes a token bounds any answer the worker
can stream. A beat carrying more is refused for that lease alone.
"""

from __future__ import annotations

import re

from durable_ops.model.tasks import MAX_ANSWER_TOKENS

ANSWER_DRAFT_MAX_BYTES = MAX_ANSWER_TOKENS * 8
DRAFT_TOO_LARGE = "answer_draft_too_large"
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_HIGH_SURROGATE = re.compile(r"[\ud800-\udbff]\Z")


def clipped(text: str, max_bytes: int = ANSWER_DRAFT_MAX_BYTES) -> str:
    """``text`` cut to at most ``max_bytes`` of UTF-8, never inside a character, and always
    text UTF-8 can carry (``paired``)."""
    text = paired(text)
    encoded = text.encode()
    if len(encoded) <= max_bytes:
        return text
    return encoded[:max_bytes].decode(errors="ignore")


def paired(text: str) -> str:
    """``text`` with each surrogate pair as the one character it spells, a last high half
    dropped and any other lone half U+FFFD.

    A model server that escapes its text (``"\\ud83d\\ude00"``) may send the two halves of
    an emoji in two chunks; each chunk's JSON then reads as a lone surrogate, and the
    draft, joined from them, holds the emoji as two code points UTF-8 cannot encode: the
    beat that carries it would fail. The half whose pair is still to come is left for the
    next draft, as a character cut by the byte budget is."""
    if _SURROGATE.search(text) is None:
        return text
    text = _HIGH_SURROGATE.sub("", text)
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
