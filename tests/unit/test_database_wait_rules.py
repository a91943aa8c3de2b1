"""The pure rules of waiting for the database (issue 20, item 3; ADR 16).

The backoff between attempts at start and the freshness of a cached answer,
checked at the extremes of the draw, for broken random sources and clocks,
and for the bound on the whole wait.
"""

from __future__ import annotations

import math
from typing import Final

import pytest
from hypothesis import given
from hypothesis import strategies as st

from durable_ops.model.availability import (
    READING_MAX_AGE_SECONDS,
    WAIT_FIRST_PAUSE_SECONDS,
    WAIT_MAX_PAUSE_SECONDS,
    is_fresh,
    next_attempt_in,
    wait_pause,
)
from durable_ops.model.lifecycle import Draw

JUST_UNDER_ONE: Final = math.nextafter(1.0, 0.0)


def fixed(value: float) -> Draw:
    return lambda: value


@pytest.mark.parametrize(
    ("failures", "ceiling"),
    [(1, 0.1), (2, 0.2), (3, 0.4), (4, 0.8), (5, 1.6), (6, 2.0), (7, 2.0), (10**6, 2.0)],
)
def test_the_pause_doubles_from_a_tenth_of_a_second_to_two(failures: int, ceiling: float) -> None:
    assert wait_pause(failures, fixed(JUST_UNDER_ONE)) == pytest.approx(ceiling)
    assert wait_pause(failures, fixed(0.0)) == pytest.approx(ceiling / 2)


def test_the_first_pause_and_the_longest_are_the_documented_ones() -> None:
    assert WAIT_FIRST_PAUSE_SECONDS == 0.1
    assert WAIT_MAX_PAUSE_SECONDS == 2.0
    assert wait_pause(0, fixed(1.0)) == pytest.approx(0.1)  # no failure yet: the first step


@given(st.integers(min_value=-5, max_value=10**9), st.floats(allow_nan=True, allow_infinity=True))
def test_any_draw_keeps_the_pause_within_half_the_step_and_the_step(
    failures: int, value: float
) -> None:
    ceiling = min(WAIT_FIRST_PAUSE_SECONDS * 2.0 ** min(max(failures - 1, 0), 16), 2.0)
    pause = wait_pause(failures, fixed(value))
    assert ceiling / 2 <= pause <= ceiling


@pytest.mark.parametrize("value", [1.5, math.inf])
def test_a_draw_above_one_is_held_to_one(value: float) -> None:
    assert wait_pause(3, fixed(value)) == wait_pause(3, fixed(1.0))


def test_replicas_started_together_spread_out() -> None:
    draws = [0.0, 0.25, 0.5, 0.75, JUST_UNDER_ONE]
    pauses = {wait_pause(3, fixed(value)) for value in draws}
    assert len(pauses) == len(draws)


def test_the_next_attempt_never_falls_past_the_bound() -> None:
    assert next_attempt_in(6, waited=59.5, bound=60.0, draw=fixed(JUST_UNDER_ONE)) == 0.5
    assert next_attempt_in(1, waited=0.0, bound=60.0, draw=fixed(JUST_UNDER_ONE)) == pytest.approx(
        0.1
    )


@pytest.mark.parametrize("waited", [60.0, 60.001, 1e9, math.inf, math.nan])
def test_once_the_bound_is_reached_there_is_no_next_attempt(waited: float) -> None:
    assert next_attempt_in(3, waited=waited, bound=60.0, draw=fixed(0.5)) is None


def test_a_zero_bound_asks_once() -> None:
    assert next_attempt_in(1, waited=0.0, bound=0.0, draw=fixed(0.5)) is None


def test_a_whole_wait_is_bounded_and_its_attempts_are_few() -> None:
    """Simulated: attempts that fail at once, paused by the rule, until it says stop."""
    for value in (0.0, 0.5, JUST_UNDER_ONE):
        waited, attempts = 0.0, 0
        while True:
            attempts += 1
            pause = next_attempt_in(attempts, waited, 60.0, fixed(value))
            if pause is None:
                break
            waited += pause
        assert waited == pytest.approx(60.0)
        # Ceilings 0.1 … 1.6 s, then 2 s: 35 to 65 attempts in a minute, never a tight loop.
        assert 35 <= attempts <= 65


def test_an_answer_holds_for_under_a_second() -> None:
    assert READING_MAX_AGE_SECONDS == 1.0
    assert is_fresh(100.0, 100.0)
    assert is_fresh(100.0, 100.999)
    assert not is_fresh(100.0, 101.0)
    assert not is_fresh(100.0, 250.0)


def test_no_answer_yet_is_never_fresh() -> None:
    assert not is_fresh(None, 0.0)


@pytest.mark.parametrize("read_at", [100.5, math.nan, math.inf, -math.inf])
def test_an_answer_from_the_future_or_no_time_is_not_fresh(read_at: float) -> None:
    assert not is_fresh(read_at, 100.0)


@pytest.mark.parametrize("max_age", [0.0, -1.0, math.nan])
def test_no_positive_max_age_means_always_ask(max_age: float) -> None:
    assert not is_fresh(100.0, 100.0, max_age)


def test_the_max_age_is_a_parameter() -> None:
    assert is_fresh(100.0, 104.0, max_age=5.0)
    assert not is_fresh(100.0, 105.0, max_age=5.0)
