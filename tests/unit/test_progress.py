"""The progress meter of a streamed answer: tokens against the budget, 1 to 99, rising."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from durable_ops.model.bounds import PROGRESS_RANGE
from durable_ops.model.progress import CEILING, DEFAULT_BUDGET_TOKENS, ProgressMeter


def test_percent_of_the_budget_reported_only_when_it_rises() -> None:
    meter = ProgressMeter(budget_tokens=200)
    assert meter.observe(0) is None
    assert meter.observe(1) is None  # 0.5 %: nothing to say yet
    assert meter.observe(2) == 1
    assert meter.observe(3) is None  # still 1 %
    assert meter.observe(50) == 25
    assert meter.observe(40) is None  # a lower count never takes progress back
    assert meter.percent == 25
    assert meter.observe(51) is None
    assert meter.observe(52) == 26


def test_it_stops_at_99_however_long_the_answer() -> None:
    meter = ProgressMeter(budget_tokens=10)
    assert meter.observe(9) == 90
    assert meter.observe(10) == 99  # 100 is completion's to write
    assert meter.observe(10_000) is None
    assert meter.percent == CEILING == PROGRESS_RANGE[1] - 1 == 99


def test_budget_must_be_positive() -> None:
    with pytest.raises(ValueError, match="budget"):
        ProgressMeter(budget_tokens=0)
    assert DEFAULT_BUDGET_TOKENS > 0


@given(st.integers(1, 5_000), st.lists(st.integers(-10, 10_000), max_size=200))
def test_reports_rise_strictly_and_stay_within_bounds(budget: int, counts: list[int]) -> None:
    meter = ProgressMeter(budget_tokens=budget)
    reported = [percent for count in counts if (percent := meter.observe(count)) is not None]
    assert reported == sorted(set(reported))
    assert all(1 <= percent <= 99 for percent in reported)
    best = max([0, *counts])
    assert meter.percent == min(99, best * 100 // budget)
