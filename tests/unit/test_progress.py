"""The progress of a streamed answer: in step with the tokens up to the expected size, then
on more slowly; 0 to 99, rising."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from durable_ops.model.bounds import PROGRESS_RANGE
from durable_ops.model.progress import (
    CEILING,
    DEFAULT_BUDGET_TOKENS,
    KNEE,
    ProgressMeter,
    percent_of,
)


def test_in_step_with_the_tokens_up_to_the_expected_size() -> None:
    assert [percent_of(tokens, 200) for tokens in (0, 2, 3, 100, 190, 200)] == [0, 0, 1, 47, 90, 95]
    assert percent_of(200, 200) == KNEE == 95


def test_a_longer_answer_moves_on_ever_more_slowly_and_stops_at_99() -> None:
    # Each further 30 % of the expected size halves what is left to 100.
    assert [percent_of(tokens, 100) for tokens in (101, 115, 130, 160, 175, 10_000)] == [
        95,
        96,
        97,
        98,
        99,
        99,
    ]
    assert CEILING == PROGRESS_RANGE[1] - 1 == 99  # 100 is completion's to write


def test_percent_reported_only_when_it_rises() -> None:
    meter = ProgressMeter(budget_tokens=190)
    assert meter.observe(0) is None
    assert meter.observe(1) is None  # 0.5 %: nothing to say yet
    assert meter.observe(2) == 1
    assert meter.observe(3) is None  # still 1 %
    assert meter.observe(100) == 50
    assert meter.observe(40) is None  # a lower count never takes progress back
    assert meter.percent == 50
    assert meter.observe(102) == 51


def test_budget_must_be_positive() -> None:
    with pytest.raises(ValueError, match="budget"):
        ProgressMeter(budget_tokens=0)
    assert DEFAULT_BUDGET_TOKENS > 0


@given(st.integers(1, 5_000), st.integers(-10, 20_000), st.integers(0, 20_000))
def test_never_lower_for_more_tokens_and_never_100(expected: int, tokens: int, more: int) -> None:
    assert 0 <= percent_of(tokens, expected) <= percent_of(tokens + more, expected) <= CEILING


@given(st.integers(1, 5_000), st.lists(st.integers(-10, 10_000), max_size=200))
def test_reports_rise_strictly_and_stay_within_bounds(budget: int, counts: list[int]) -> None:
    meter = ProgressMeter(budget_tokens=budget)
    reported = [percent for count in counts if (percent := meter.observe(count)) is not None]
    assert reported == sorted(set(reported))
    assert all(1 <= percent <= 99 for percent in reported)
    assert meter.percent == percent_of(max([0, *counts]), budget)
