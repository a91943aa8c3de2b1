"""How far a streamed model answer has come: tokens received against the answer budget.

A model cannot say how long its answer will be. The budget is what the task
expects: about one and a half times its typical answer
(``TaskType.answer_tokens``, the request's ``expected_tokens``). So the
estimate is ``tokens received / budget``, a lower bound that grows steadily
and usually ends short of the budget.

It stops at 99: the answer is not done when the last token arrives, it is
done when it has been parsed, validated and published, and only completing
the operation writes 100. A meter reports a percent only when it increased,
so a caller may forward every value it gets without repeating itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from durable_ops.model.bounds import PROGRESS_RANGE

DEFAULT_BUDGET_TOKENS = 1_024
"""The budget of a request that names neither an expected size nor ``max_tokens``:
generous for our structured answers of a few hundred tokens, so such a request
merely shows a lower percent before completion writes 100."""

CEILING = PROGRESS_RANGE[1] - 1  # 99: 100 is written only by completion


@dataclass
class ProgressMeter:
    budget_tokens: int
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
        percent = min(CEILING, max(0, tokens) * 100 // self.budget_tokens)
        if percent <= self._reported:
            return None
        self._reported = percent
        return percent
