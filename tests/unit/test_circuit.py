"""The local model's circuit breaker, driven by an explicit clock."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from durable_ops.model.circuit import CircuitBreaker, CircuitState, Ticket


def admitted(breaker: CircuitBreaker, now: float) -> Ticket:
    ticket = breaker.allow(now)
    assert ticket is not None
    return ticket


def fail(breaker: CircuitBreaker, now: float) -> None:
    """A call admitted at ``now`` fails at once."""
    breaker.record_failure(now, admitted(breaker, now))


def opened(threshold: int = 3, cooldown: float = 10.0, at: float = 0.0) -> CircuitBreaker:
    breaker = CircuitBreaker(threshold, cooldown)
    for _ in range(threshold):
        fail(breaker, at)
    return breaker


def test_starts_closed_and_allows() -> None:
    breaker = CircuitBreaker(3, 10.0)
    assert breaker.state(0.0) is CircuitState.CLOSED
    assert breaker.allow(0.0)


def test_opens_after_threshold_consecutive_failures() -> None:
    breaker = CircuitBreaker(3, 10.0)
    fail(breaker, 1.0)
    fail(breaker, 2.0)
    assert breaker.state(2.0) is CircuitState.CLOSED
    fail(breaker, 3.0)
    assert breaker.state(3.0) is CircuitState.OPEN
    assert not breaker.allow(3.0)


def test_a_success_resets_the_consecutive_count() -> None:
    breaker = CircuitBreaker(3, 10.0)
    fail(breaker, 1.0)
    fail(breaker, 2.0)
    breaker.record_success(3.0)
    assert breaker.consecutive_failures == 0
    fail(breaker, 4.0)
    fail(breaker, 5.0)
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
    trial = admitted(breaker, 10.0)
    breaker.record_failure(12.0, trial)
    assert breaker.state(12.0) is CircuitState.OPEN
    assert not breaker.allow(21.9)
    assert breaker.state(22.0) is CircuitState.HALF_OPEN


def test_a_lost_trial_expires_after_a_cooldown() -> None:
    breaker = opened(cooldown=10.0)
    assert breaker.allow(10.0)  # its caller is cancelled and never reports
    assert not breaker.allow(19.9)
    assert breaker.allow(20.0)


def test_late_failures_while_open_do_not_extend_the_cooldown() -> None:
    breaker = CircuitBreaker(3, 10.0)
    early = admitted(breaker, 0.0)
    for _ in range(3):
        fail(breaker, 0.0)
    breaker.record_failure(5.0, early)
    assert breaker.state(10.0) is CircuitState.HALF_OPEN


def test_a_late_failure_of_a_call_admitted_before_the_circuit_opened_spares_the_trial() -> None:
    """A call the model held since before the outage (a timeout, a dropped request) fails
    while the half-open trial runs: the circuit stays half-open, waiting on the trial, and
    the trial's own verdict still counts."""
    breaker = CircuitBreaker(2, 10.0)
    early = admitted(breaker, 0.0)
    fail(breaker, 1.0)
    fail(breaker, 1.0)
    trial = admitted(breaker, 11.0)
    breaker.record_failure(12.0, early)
    assert breaker.state(12.0) is CircuitState.HALF_OPEN
    assert breaker.allow(12.0) is None  # the trial is still out
    breaker.record_failure(13.0, trial)
    assert breaker.state(13.0) is CircuitState.OPEN


def test_a_late_failure_in_half_open_before_any_trial_does_not_reopen() -> None:
    breaker = CircuitBreaker(1, 10.0)
    early = admitted(breaker, 0.0)
    fail(breaker, 0.0)
    breaker.record_failure(10.5, early)
    assert breaker.state(10.5) is CircuitState.HALF_OPEN
    assert breaker.allow(10.5) is not None  # the cooldown's trial is still to be had


def test_a_lost_trials_late_failure_does_not_judge_the_next_trial() -> None:
    breaker = opened(cooldown=10.0)
    lost = admitted(breaker, 10.0)  # its caller went quiet
    assert breaker.allow(15.0) is None
    trial = admitted(breaker, 20.0)  # the lost one expired: another call is the trial
    breaker.record_failure(21.0, lost)
    assert breaker.state(21.0) is CircuitState.HALF_OPEN
    assert breaker.allow(21.0) is None
    breaker.record_failure(22.0, trial)
    assert breaker.state(22.0) is CircuitState.OPEN


def test_a_trials_failure_reopens_once() -> None:
    breaker = opened(cooldown=10.0)
    trial = admitted(breaker, 10.0)
    breaker.record_failure(11.0, trial)
    breaker.record_failure(21.0, trial)  # told twice, after the next cooldown
    assert breaker.state(21.0) is CircuitState.HALF_OPEN


def test_any_answer_closes_even_to_a_call_admitted_before_the_circuit_opened() -> None:
    breaker = CircuitBreaker(1, 10.0)
    admitted(breaker, 0.0)  # the model holds it
    fail(breaker, 0.0)
    assert admitted(breaker, 10.0).trial is not None  # the trial is out
    breaker.record_success(10.5)  # the early call's answer
    assert breaker.state(10.5) is CircuitState.CLOSED
    assert admitted(breaker, 10.5).trial is None


def test_threshold_of_one_opens_on_first_failure() -> None:
    breaker = CircuitBreaker(1, 5.0)
    fail(breaker, 0.0)
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
        st.integers(min_value=0, max_value=7),  # which admitted call a failure is
    ),
    max_size=60,
)


@given(events)
def test_never_admits_while_open_and_at_most_one_trial_per_window(
    steps: list[tuple[str, float, int]],
) -> None:
    """And only the trial out now reopens a half-open circuit."""
    cooldown = 3.0
    breaker = CircuitBreaker(2, cooldown)
    now = 0.0
    last_trial: float | None = None
    trial: Ticket | None = None  # the trial out now
    tickets: list[Ticket] = []
    for action, advance, which in steps:
        now += advance
        state = breaker.state(now)
        if action == "allow":
            allowed = breaker.allow(now)
            if state is CircuitState.CLOSED:
                assert allowed == Ticket(trial=None)
            elif state is CircuitState.OPEN:
                assert allowed is None
            elif allowed is not None:
                assert last_trial is None or now - last_trial >= cooldown
                last_trial, trial = now, allowed
            if allowed is not None:
                tickets.append(allowed)
        elif action == "success":
            breaker.record_success(now)
            assert breaker.state(now) is CircuitState.CLOSED
            last_trial = trial = None
        elif tickets:
            ticket = tickets[which % len(tickets)]
            breaker.record_failure(now, ticket)
            if state is CircuitState.HALF_OPEN:
                reopened = breaker.state(now) is CircuitState.OPEN
                assert reopened is (trial is not None and ticket == trial)
            if state is not CircuitState.CLOSED:
                assert breaker.state(now) is not CircuitState.CLOSED
            if breaker.state(now) is CircuitState.OPEN:
                last_trial = trial = None
