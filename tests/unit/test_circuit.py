"""The local model's circuit breaker, driven by an explicit clock."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from durable_ops.model.circuit import CircuitBreaker, CircuitState


def opened(threshold: int = 3, cooldown: float = 10.0, at: float = 0.0) -> CircuitBreaker:
    breaker = CircuitBreaker(threshold, cooldown)
    for _ in range(threshold):
        assert breaker.allow(at)
        breaker.record_failure(at)
    return breaker


def test_starts_closed_and_allows() -> None:
    breaker = CircuitBreaker(3, 10.0)
    assert breaker.state(0.0) is CircuitState.CLOSED
    assert breaker.allow(0.0)


def test_opens_after_threshold_consecutive_failures() -> None:
    breaker = CircuitBreaker(3, 10.0)
    breaker.record_failure(1.0)
    breaker.record_failure(2.0)
    assert breaker.state(2.0) is CircuitState.CLOSED
    breaker.record_failure(3.0)
    assert breaker.state(3.0) is CircuitState.OPEN
    assert not breaker.allow(3.0)


def test_a_success_resets_the_consecutive_count() -> None:
    breaker = CircuitBreaker(3, 10.0)
    breaker.record_failure(1.0)
    breaker.record_failure(2.0)
    breaker.record_success(3.0)
    assert breaker.consecutive_failures == 0
    breaker.record_failure(4.0)
    breaker.record_failure(5.0)
    assert breaker.state(5.0) is CircuitState.CLOSED


def test_half_opens_after_the_cooldown_and_admits_one_trial() -> None:
    breaker = opened(cooldown=10.0, at=100.0)
    assert not breaker.allow(109.9)
    assert breaker.state(110.0) is CircuitState.HALF_OPEN
    assert breaker.allow(110.0)
    assert not breaker.allow(110.5)  # the trial is in flight
    assert breaker.state(110.5) is CircuitState.HALF_OPEN


def test_trial_success_closes() -> None:
    breaker = opened(cooldown=10.0)
    assert breaker.allow(10.0)
    breaker.record_success(11.0)
    assert breaker.state(11.0) is CircuitState.CLOSED
    assert breaker.allow(11.0)
    assert breaker.allow(11.0)


def test_trial_failure_reopens_for_a_full_cooldown() -> None:
    breaker = opened(cooldown=10.0)
    assert breaker.allow(10.0)
    breaker.record_failure(12.0)
    assert breaker.state(12.0) is CircuitState.OPEN
    assert not breaker.allow(21.9)
    assert breaker.state(22.0) is CircuitState.HALF_OPEN


def test_a_lost_trial_expires_after_a_cooldown() -> None:
    breaker = opened(cooldown=10.0)
    assert breaker.allow(10.0)  # its caller is cancelled and never reports
    assert not breaker.allow(19.9)
    assert breaker.allow(20.0)


def test_late_failures_while_open_do_not_extend_the_cooldown() -> None:
    breaker = opened(cooldown=10.0, at=0.0)
    breaker.record_failure(5.0)
    assert breaker.state(10.0) is CircuitState.HALF_OPEN


def test_threshold_of_one_opens_on_first_failure() -> None:
    breaker = CircuitBreaker(1, 5.0)
    breaker.record_failure(0.0)
    assert breaker.state(0.0) is CircuitState.OPEN


@pytest.mark.parametrize(("threshold", "cooldown"), [(0, 1.0), (1, -0.1)])
def test_rejects_meaningless_settings(threshold: int, cooldown: float) -> None:
    with pytest.raises(ValueError, match="must"):
        CircuitBreaker(threshold, cooldown)


def test_states_have_stable_names() -> None:
    assert [state.value for state in CircuitState] == ["closed", "half_open", "open"]


events = st.lists(
    st.tuples(
        st.sampled_from(["allow", "success", "failure"]),
        st.floats(min_value=0.0, max_value=5.0, allow_nan=False),
    ),
    max_size=60,
)


@given(events)
def test_never_admits_while_open_and_at_most_one_trial_per_window(
    steps: list[tuple[str, float]],
) -> None:
    cooldown = 3.0
    breaker = CircuitBreaker(2, cooldown)
    now = 0.0
    last_trial: float | None = None
    for action, advance in steps:
        now += advance
        state = breaker.state(now)
        if action == "allow":
            allowed = breaker.allow(now)
            if state is CircuitState.CLOSED:
                assert allowed
            elif state is CircuitState.OPEN:
                assert not allowed
            elif allowed:
                assert last_trial is None or now - last_trial >= cooldown
                last_trial = now
        elif action == "success":
            breaker.record_success(now)
            assert breaker.state(now) is CircuitState.CLOSED
            last_trial = None
        else:
            breaker.record_failure(now)
            if state is not CircuitState.CLOSED:
                assert breaker.state(now) is not CircuitState.CLOSED
            if breaker.state(now) is CircuitState.OPEN:
                last_trial = None
