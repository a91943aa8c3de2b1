"""The answer a running attempt has written so far (issue 39): its size bound. Pure.

A model answer is at most ``MAX_ANSWER_TOKENS`` tokens; a token is rarely more
than a few bytes of UTF-8, so eight bytes a token bounds any answer the worker
can stream. A beat carrying more is refused for that lease alone.
"""

from __future__ import annotations

from durable_ops.model.tasks import MAX_ANSWER_TOKENS

ANSWER_DRAFT_MAX_BYTES = MAX_ANSWER_TOKENS * 8
DRAFT_TOO_LARGE = "answer_draft_too_large"


def clipped(text: str, max_bytes: int = ANSWER_DRAFT_MAX_BYTES) -> str:
    """``text`` cut to at most ``max_bytes`` of UTF-8, never inside a character."""
    encoded = text.encode()
    if len(encoded) <= max_bytes:
        return text
    return encoded[:max_bytes].decode(errors="ignore")
