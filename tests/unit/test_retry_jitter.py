"""Jittered retries: an operation's next attempt and a deadlock victim's replay (issue 20, item 6).

The decisions are pure: the random source is a parameter, so the bounds are
checked at the extremes of the draw (0 and just under 1), for arbitrary draws,
for broken sources, and as a distribution of many seeded draws.
"""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime, timedelta
from typing import Final

import pytest
from hypothesis import given
from hypothesis import strategies as st

from durable_ops.model import lifecycle
from durable_ops.model.lifecycle import Event, Facts, backoff, decide, retry_wait
from durable_ops.model.states import OperationState
from durable_ops.storage.db import (
    TRANSACTION_RETRY_BASE_SECONDS,
    TRANSACTION_RETRY_MAX_SECONDS,
    transaction_retry_pause,
)

S = OperationState
NOW: Final = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
ONE_HOUR: Final = timedelta(hours=1)  # the largest allowed retry delay, SPEC §3
JUST_UNDER_ONE: Final = math.nextafter(1.0, 0.0)

attempts = st.integers(min_value=0, max_value=10**6)
retry_delays = st.integers(min_value=1, max_value=3600)  # SPEC §3: retry delay 1 s - 1 h
draws = st.floats(min_value=0.0, max_value=JUST_UNDER_ONE)
any_floats = st.floats(allow_nan=True, allow_infinity=True)


def fixed(value: float) -> lifecycle.Draw:
    return lambda: value


def ceiling(attempt: int, delay: int) -> timedelta:
    return min(timedelta(seconds=delay * 2 ** min(attempt, 20)), ONE_HOUR)


# ---- an operation's next attempt ---------------------------------------------------------------


@given(attempt=attempts, delay=retry_delays, draw=draws)
def test_a_retry_waits_between_the_retry_delay_and_one_hour(
    attempt: int, delay: int, draw: float
) -> None:
    wait = retry_wait(attempt, delay, fixed(draw))
    assert timedelta(seconds=delay) <= wait <= ceiling(max(attempt, 1), delay) <= ONE_HOUR
    assert wait % timedelta(milliseconds=1) == timedelta(0)  # whole milliseconds


@given(attempt=attempts, delay=retry_delays, value=any_floats)
def test_any_source_even_a_broken_one_stays_within_the_bounds(
    attempt: int, delay: int, value: float
) -> None:
    wait = retry_wait(attempt, delay, fixed(value))
    assert timedelta(seconds=delay) <= wait <= ONE_HOUR


@pytest.mark.parametrize(("attempt", "delay"), [(1, 1), (1, 30), (2, 30), (3, 10), (5, 60)])
def test_the_draw_spans_the_whole_range(attempt: int, delay: int) -> None:
    assert retry_wait(attempt, delay, fixed(0.0)) == timedelta(seconds=delay)
    top = retry_wait(attempt, delay, fixed(JUST_UNDER_ONE))
    assert ceiling(attempt, delay) - timedelta(milliseconds=1) <= top <= ceiling(attempt, delay)
    assert retry_wait(attempt, delay, fixed(1.0)) == ceiling(attempt, delay)


def test_the_first_retry_is_jittered_too() -> None:
    """Operations that failed together (a model server down) do not come back together."""
    waits = {retry_wait(1, 30, fixed(draw)) for draw in (0.0, 0.25, 0.5, 0.75)}
    assert len(waits) == 4
    assert all(timedelta(seconds=30) <= wait <= timedelta(seconds=60) for wait in waits)


@pytest.mark.parametrize("attempt", [1, 3, 10, 10**9])
def test_the_largest_retry_delay_waits_exactly_one_hour(attempt: int) -> None:
    assert retry_wait(attempt, 3600, fixed(0.7)) == ONE_HOUR


def test_the_ceiling_is_the_next_step_of_the_unjittered_schedule() -> None:
    for attempt in range(1, 20):
        assert retry_wait(attempt, 7, fixed(1.0)) == backoff(attempt + 1, 7)


@pytest.mark.parametrize(("attempt", "delay"), [(1, 30), (3, 5), (8, 1)])
def test_the_distribution_is_uniform_over_the_range(attempt: int, delay: int) -> None:
    source = random.Random(20)
    low, high = timedelta(seconds=delay), ceiling(attempt, delay)
    samples = [retry_wait(attempt, delay, source.random) for _ in range(4000)]
    assert all(low <= wait <= high for wait in samples)
    fractions = [(wait - low) / (high - low) for wait in samples]
    mean = sum(fractions) / len(fractions)
    assert 0.45 < mean < 0.55  # uniform: 0.5
    quarters = [sum(1 for f in fractions if q / 4 <= f < (q + 1) / 4) for q in range(4)]
    assert all(850 < count < 1150 for count in quarters), quarters  # 1000 each
    assert min(fractions) < 0.01
    assert max(fractions) > 0.99


def _running(attempt: int, lease_expires_at: datetime = NOW + timedelta(seconds=30)) -> Facts:
    return Facts(
        state=S.RUNNING,
        attempt=attempt,
        max_attempts=10,
        retry_delay_seconds=20,
        lease_expires_at=lease_expires_at,
    )


@pytest.mark.parametrize("draw", [0.0, 0.5, JUST_UNDER_ONE])
def test_decide_takes_the_wait_from_the_given_source(draw: float) -> None:
    decision = decide(_running(2), Event.FAIL_RETRYABLE, NOW, fixed(draw))
    assert decision.state is S.WAITING_FOR_RETRY
    assert decision.next_attempt_at == NOW + retry_wait(2, 20, fixed(draw))


def test_an_expired_lease_waits_a_jittered_retry_too() -> None:
    facts = _running(1, lease_expires_at=NOW - timedelta(seconds=1))
    decision = decide(facts, Event.SWEEP, NOW, fixed(0.5))
    assert decision.next_attempt_at == NOW + timedelta(seconds=30)  # 20 s + half of 20 s


def test_decide_without_a_source_uses_the_module_source(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lifecycle, "RETRY_JITTER", fixed(0.0))
    decision = decide(_running(3), Event.FAIL_RETRYABLE, NOW)
    assert decision.next_attempt_at == NOW + timedelta(seconds=20)


def test_the_system_source_draws_in_the_unit_interval() -> None:
    values = [lifecycle.system_draw() for _ in range(1000)]
    assert all(0.0 <= value < 1.0 for value in values)
    assert len(set(values)) > 990


# ---- a deadlock victim's replay ----------------------------------------------------------------


def pause_ceiling(number: int) -> float:
    growth: float = 2.0**number
    return min(TRANSACTION_RETRY_BASE_SECONDS * growth, TRANSACTION_RETRY_MAX_SECONDS)


@given(number=st.integers(min_value=1, max_value=10**6), value=any_floats)
def test_a_replay_pauses_at_most_the_capped_exponential(number: int, value: float) -> None:
    pause = transaction_retry_pause(number, fixed(value))
    assert 0.0 <= pause <= pause_ceiling(min(number, 16)) <= TRANSACTION_RETRY_MAX_SECONDS


@pytest.mark.parametrize("number", [1, 2, 5, 7, 40])
def test_a_replay_pause_spans_zero_to_its_ceiling(number: int) -> None:
    assert transaction_retry_pause(number, fixed(0.0)) == 0.0
    assert transaction_retry_pause(number, fixed(1.0)) == pytest.approx(pause_ceiling(number))
    assert transaction_retry_pause(number, fixed(0.5)) == pytest.approx(pause_ceiling(number) / 2)


def test_replay_pauses_are_uniform_and_the_cap_is_200_ms() -> None:
    assert TRANSACTION_RETRY_MAX_SECONDS == 0.2
    source = random.Random(7)
    pauses = [transaction_retry_pause(3, source.random) for _ in range(4000)]
    assert all(0.0 <= pause <= 0.016 for pause in pauses)
    mean = sum(pauses) / len(pauses)
    assert 0.0072 < mean < 0.0088  # uniform on [0, 16 ms]: 8 ms
