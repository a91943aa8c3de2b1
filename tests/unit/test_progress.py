"""The progress of a streamed answer: in step with the tokens up to the expected size, then
on more slowly; after the prompt's reading, where the server reports it; 0 to 99, rising."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from durable_ops.model.bounds import PROGRESS_RANGE
from durable_ops.model.progress import (
    CEILING,
    DEFAULT_BUDGET_TOKENS,
    KNEE,
    MAX_READING_SHARE,
    ProgressMeter,
    percent_of,
    percent_read,
    reading_share,
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


def test_reading_the_prompt_has_its_share_of_the_work() -> None:
    # One answer token costs five prompt tokens: the tester's 2,800-token prompt before an
    # answer of 235 is about 70 % of the time (14 s of reading, some 6 s of answer).
    assert reading_share(2_800, 235) == 70
    assert reading_share(400, 200) == 28
    assert reading_share(0, 200) == 0  # all of it cached: nothing to read
    assert reading_share(18_000, 100) == MAX_READING_SHARE == 75  # the answer keeps a quarter
    assert [percent_read(read, 2_800, 70) for read in (0, 1, 1_400, 2_800, 3_000)] == [
        0,
        0,
        35,
        70,
        70,
    ]


def test_the_answer_climbs_from_the_reading_share() -> None:
    assert [percent_of(tokens, 200, 40) for tokens in (0, 100, 200, 10_000)] == [40, 68, 97, 99]
    meter = ProgressMeter(budget_tokens=235)
    assert meter.read(processed=0, total=2_800) is None  # 0 %: reading just began
    assert meter.share == 70
    assert meter.read(processed=2_049, total=2_800) == 51
    assert meter.read(processed=2_800, total=2_800) == 70
    assert meter.observe(1) is None  # 70 + a fraction: nothing to say yet
    assert meter.observe(10) == 71
    assert meter.observe(235) == 98
    assert meter.read(processed=2_800, total=2_800) is None


def test_a_cached_prefix_is_not_read_again() -> None:
    meter = ProgressMeter(budget_tokens=200)
    assert meter.read(processed=2_000, total=2_400, cache=2_000) is None
    assert meter.share == 28  # the 400 tokens still to read
    assert meter.read(processed=2_200, total=2_400, cache=2_000) == 14
    meter = ProgressMeter(budget_tokens=200)
    assert meter.read(processed=2_399, total=2_400, cache=2_399) is None
    assert meter.share == 0


def test_an_answer_that_began_unannounced_keeps_the_whole_bar() -> None:
    meter = ProgressMeter(budget_tokens=200)
    assert meter.observe(100) == 47
    assert meter.read(processed=0, total=5_000) is None  # too late to share the bar
    assert meter.share == 0
    assert meter.observe(200) == 95


@given(
    st.integers(1, 5_000),
    st.integers(1, 20_000),
    st.integers(0, 20_000),
    st.lists(st.tuples(st.booleans(), st.integers(-10, 20_000)), max_size=200),
)
def test_with_the_reading_reports_still_rise_strictly_and_stay_below_100(
    budget: int, total: int, cache: int, events: list[tuple[bool, int]]
) -> None:
    meter = ProgressMeter(budget_tokens=budget)
    reported = [
        percent
        for reading, count in events
        if (
            percent := meter.read(count, total, min(cache, total))
            if reading
            else meter.observe(count)
        )
        is not None
    ]
    assert reported == sorted(set(reported))
    assert all(1 <= percent <= 99 for percent in reported)
