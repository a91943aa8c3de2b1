"""What one exchange with a model server used, from what the server said of it. Pure.

Tokens are the server's own ``usage`` counts (``prompt_tokens``,
``completion_tokens``), asked for in a stream with ``stream_options.include_usage``.
A server that gives none is counted by what the worker saw: its content chunks
(one chunk is about one token, as the progress estimate counts them) and, once
any content came (the server had read the prompt), the prompt estimated from the
make-up of its text (``budgets.prompt_tokens_of``: ASCII at about 4 characters a token,
other letters at 3, CJK, kana and Hangul at 2, emoji at 1, as measured on the real
model), since the worker cannot tokenize: an answer cancelled before its end was
otherwise charged as if the prompt were free. Before, at 4 characters a token whatever
the script, Japanese prose was charged about half its tokens (2,000 for 3,803).
The model's own time is the
server's ``timings`` (llama.cpp: ``prompt_ms`` + ``predicted_ms``) where given,
else the time the worker measured from sending the request to the answer's end.
An answer cut off partway (a cancel, the timeout, a lost connection) is counted the
same way, with what came before the cut: its server's ``usage`` comes last (ADR 57).
Each figure is held within what one settlement may carry (``model.bounds``).
"""

from __future__ import annotations

from durable_ops.model.bounds import MODEL_MS_MAX, USAGE_TOKENS_MAX
from durable_ops.model.budgets import prompt_tokens_of
from durable_ops.model.usage import Usage


def _count(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return min(value, USAGE_TOKENS_MAX)


def _milliseconds(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        return None
    # Held before it is summed or made a float: a server's 1e400 (infinity) or 400-digit
    # integer raised OverflowError there, and the exchange's valid answer was lost.
    return float(min(value, MODEL_MS_MAX))


def server_milliseconds(timings: object) -> float | None:
    """The model's own time in a llama.cpp ``timings`` object; None without one."""
    if not isinstance(timings, dict):
        return None
    parts = [_milliseconds(timings.get(name)) for name in ("prompt_ms", "predicted_ms")]
    if any(part is None for part in parts):
        return None
    return sum(part for part in parts if part is not None)


def exchange_usage(
    usage: object,
    timings: object,
    *,
    counted_tokens: int,
    measured_seconds: float,
    prompt_text: str = "",
) -> Usage:
    """The usage of one exchange: the server's figures where it gave them, else ours
    (``prompt_text``: the text of the request's messages)."""
    given = usage if isinstance(usage, dict) else {}
    prompt = _count(given.get("prompt_tokens"))
    completion = _count(given.get("completion_tokens"))
    if prompt is None or completion is None:
        read = counted_tokens > 0  # content came: the server had read the prompt
        prompt = min(prompt_tokens_of(prompt_text), USAGE_TOKENS_MAX) if read else 0
        completion = min(counted_tokens, USAGE_TOKENS_MAX)
    milliseconds = server_milliseconds(timings)
    if milliseconds is None:
        milliseconds = max(0.0, measured_seconds) * 1000
    return Usage(prompt, completion, min(round(milliseconds), MODEL_MS_MAX))
