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

Before the first answer token the model reads the prompt, and a long one takes
it a while (Gemma 3 270M on two cores: about 5 ms a token, some 14 s for 2,800
tokens). A server that reports how far it has read (llama-server's
``prompt_progress``) gives that reading its share of the bar: ``reading_share``,
the part of the work the prompt is when one answer token costs ``WRITE_COST``
prompt tokens, at most ``MAX_READING_SHARE``. The bar fills to the share while
the prompt is read and the answer climbs from it over the rest. The share is set
by the first report of the reading, from what is still to read (a cached
prefix costs nothing), and kept; an answer without such reports has none.
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
# One answer token takes the model about as long as reading five prompt tokens (llama-server
# with Gemma 3 270M on CPU: about 5 ms a prompt token, 25 ms an answer token).
WRITE_COST = 5
MAX_READING_SHARE = 75  # the answer always keeps a quarter of the bar


def reading_share(prompt_tokens: int, expected_tokens: int) -> int:
    """The percent of the bar for reading ``prompt_tokens`` (not cached) before an answer
    whose expected size is ``expected_tokens``: 0 to ``MAX_READING_SHARE``."""
    if prompt_tokens <= 0:
        return 0
    work = prompt_tokens + WRITE_COST * max(1, expected_tokens)
    return min(MAX_READING_SHARE, 100 * prompt_tokens // work)


def percent_read(read: int, to_read: int, share: int) -> int:
    """The progress once ``read`` of the ``to_read`` prompt tokens were read: 0 to ``share``."""
    if to_read <= 0:
        return share
    return share * min(max(0, read), to_read) // to_read


def percent_of(tokens: int, expected_tokens: int, share: int = 0) -> int:
    """The progress of an answer ``tokens`` long whose expected size is ``expected_tokens``:
    ``share`` (the prompt's reading, done) to ``CEILING``, never lower for more tokens."""
    answered = _answered(tokens, expected_tokens)
    return share + answered * (100 - share) // 100


def _answered(tokens: int, expected_tokens: int) -> int:
    tokens = max(0, tokens)
    if tokens <= expected_tokens:
        return KNEE * tokens // expected_tokens
    ratio = tokens / expected_tokens
    rest = (100 - KNEE) * 0.5 ** ((ratio - 1) / HALVING)
    return min(CEILING, int(100 - rest))


@dataclass
class ProgressMeter:
    budget_tokens: int  # the expected size of the answer
    _reported: int = field(default=PROGRESS_RANGE[0], init=False, repr=False)
    _share: int | None = field(default=None, init=False, repr=False)  # set once, then kept

    def __post_init__(self) -> None:
        if self.budget_tokens < 1:
            raise ValueError("budget_tokens must be positive")

    @property
    def percent(self) -> int:
        """The last percent reported (0 before the first)."""
        return self._reported

    @property
    def share(self) -> int:
        """The percent the prompt's reading has of the bar (0 until it was reported)."""
        return self._share or 0

    def read(self, processed: int, total: int, cache: int = 0) -> int | None:
        """The percent once the server read ``processed`` of the prompt's ``total`` tokens,
        ``cache`` of them from its cache (llama-server's ``prompt_progress``), or None when
        it did not increase. The first report sets the reading's share; a report after the
        answer began says nothing new."""
        cache = min(max(0, cache), total)
        if self._share is None:
            self._share = reading_share(total - cache, self.budget_tokens)
        return self._report(percent_read(processed - cache, total - cache, self._share))

    def observe(self, tokens: int) -> int | None:
        """The percent for ``tokens`` received so far, or None when it did not increase."""
        if self._share is None and tokens > 0:
            self._share = 0  # the answer began unannounced: it has the whole bar
        return self._report(percent_of(tokens, self.budget_tokens, self.share))

    def _report(self, percent: int) -> int | None:
        if percent <= self._reported:
            return None
        self._reported = percent
        return percent
