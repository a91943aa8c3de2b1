"""How far a streamed model answer has come: tokens received against the expected size.

A model cannot say how long its answer will be. What the task expects can: the
size most of its answers reach, with and without its context
(``TaskType.expected_tokens``, the request's ``expected_tokens``). Progress
climbs in step with the tokens, ``KNEE`` percent at that size, so an answer of
the usual length ends near the top of the bar instead of jumping from half way
to done. A longer answer does not stall at the top: past the expected size each
further ``HALVING`` of it halves what is left to 100 (shown up to ``CEILING``), so
the bar still moves, ever more slowly, until the answer ends.

It stops below 100: the answer is not done when the last token arrives, it is
done when it has been parsed, validated and published, and only completing
the operation writes 100. A meter reports a percent only when it increased,
so a caller may forward every value it gets without repeating itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from durable_ops.model.bounds import PROGRESS_RANGE

DEFAULT_BUDGET_TOKENS = 1_024
"""The expected size of a request that names neither an expected size nor ``max_tokens``:
generous for our structured answers of a few hundred tokens, so such a request
merely shows a lower percent before completion writes 100."""

CEILING = PROGRESS_RANGE[1] - 1  # 99: 100 is written only by completion
KNEE = 95  # the percent at the expected size: linear up to it
# Past the expected size, each further 30 % of it halves the rest to 100: the development
# model's longest answers (1.4 times) end at 98, the real model's (Gemma 3 270M, up to about
# 1.9 times: it fills every list) reach 99 only near their end.
HALVING = 0.3


def percent_of(tokens: int, expected_tokens: int) -> int:
    """The progress of an answer ``tokens`` long whose expected size is ``expected_tokens``:
    0 to ``CEILING``, never lower for more tokens."""
    tokens = max(0, tokens)
    if tokens <= expected_tokens:
        return KNEE * tokens // expected_tokens
    share = tokens / expected_tokens
    rest = (100 - KNEE) * 0.5 ** ((share - 1) / HALVING)
    return min(CEILING, int(100 - rest))


@dataclass
class ProgressMeter:
    budget_tokens: int  # the expected size of the answer
    _reported: int = field(default=PROGRESS_RANGE[0], init=False, repr=False)

    def __post_init__(self) -> None:
        if self.budget_tokens < 1:
            raise ValueError("budget_tokens must be positive")

    @property
    def percent(self) -> int:
        """The last percent reported (0 before the first)."""
        return self._reported

    def observe(self, tokens: int) -> int | None:
        """The percent for ``tokens`` received so far, or None when it did not increase."""
        percent = percent_of(tokens, self.budget_tokens)
        if percent <= self._reported:
            return None
        self._reported = percent
        return percent
