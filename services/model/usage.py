"""What an attempt's model calls used: tokens as the model server counted them, and the
model's own time (issue 36). Pure.

The worker reports it with the settlement that ends the attempt; the attempt row keeps
it and the operation adds it to its totals in that same transaction (ADR 0038). Time is
whole milliseconds: the server's own ``timings`` (llama-server's ``prompt_ms`` +
``predicted_ms``) where it gives them, else what the worker measured around the call.
"""

from __future__ import annotations

from dataclasses import dataclass

from durable_ops.model.bounds import MODEL_MS_MAX, USAGE_TOKENS_MAX, int_range


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    model_ms: int = 0  # the model's own time, in milliseconds

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def model_seconds(self) -> float:
        return self.model_ms / 1000

    def checked(self) -> Usage:
        """This usage, when each figure is within what one settlement may report."""
        int_range("usage.prompt_tokens", self.prompt_tokens, (0, USAGE_TOKENS_MAX))
        int_range("usage.completion_tokens", self.completion_tokens, (0, USAGE_TOKENS_MAX))
        int_range("usage.model_ms", self.model_ms, (0, MODEL_MS_MAX))
        return self

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.model_ms + other.model_ms,
        )


def total(usages: list[Usage]) -> Usage | None:
    """The sum of ``usages``; None when there are none (nothing was reported)."""
    if not usages:
        return None
    found = Usage()
    for usage in usages:
        found += usage
    return found
