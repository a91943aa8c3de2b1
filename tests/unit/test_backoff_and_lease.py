"""Backoff, lease expiry and the time predicates of the lifecycle (SPEC §3)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Final

import pytest
from hypothesis import given
from hypothesis import strategies as st

from durable_ops.model.errors import InvalidArgument
from durable_ops.model.lifecycle import (
    Facts,
    backoff,
    deadline_passed,
    is_due,
    lease_expired,
    lease_expiry,
)
from durable_ops.model.states import OperationState

S = OperationState

NOW: Final = datetime(2026, 8, 9, 12, 0, tzinfo=UTC)
MAX_BACKOFF: Final = timedelta(seconds=3600)  # the largest allowed retry delay, SPEC §3
TICK: Final = timedelta(microseconds=1)

attempts = st.integers(min_value=0, max_value=10**6)
retry_delays = st.integers(min_value=1, max_value=3600)  # SPEC §3: retry delay 1 s - 1 h


def facts(
    state: OperationState,
    *,
    deadline_at: datetime | None = None,
    next_attempt_at: datetime | None = None,
    lease_expires_at: datetime | None = None,
) -> Facts:
    return Facts(
        state=state,
        attempt=1,
        max_attempts=3,
        retry_delay_seconds=5,
        deadline_at=deadline_at,
        next_attempt_at=next_attempt_at,
        lease_expires_at=lease_expires_at,
    )


# --- backoff ------------------------------------------------------------------------------


@given(attempt=attempts, delay=retry_delays)
def test_backoff_is_bounded_by_the_retry_delay_and_one_hour(attempt: int, delay: int) -> None:
    wait = backoff(attempt, delay)
    assert timedelta(seconds=delay) <= wait <= MAX_BACKOFF


@given(attempt=attempts, delay=retry_delays)
def test_backoff_is_monotone_non_decreasing_in_the_attempt(attempt: int, delay: int) -> None:
    assert backoff(attempt, delay) <= backoff(attempt + 1, delay)


@given(a=attempts, b=attempts, delay=retry_delays)
def test_backoff_is_monotone_for_any_pair_of_attempts(a: int, b: int, delay: int) -> None:
    low, high = sorted((a, b))
    assert backoff(low, delay) <= backoff(high, delay)


@given(delay=retry_delays)
def test_first_retry_waits_the_retry_delay(delay: int) -> None:
    assert backoff(1, delay) == timedelta(seconds=delay)


@pytest.mark.parametrize("delay", [1, 5, 60])
def test_backoff_grows_and_then_saturates_at_one_hour(delay: int) -> None:
    waits = [backoff(attempt, delay) for attempt in range(1, 40)]
    assert waits[1] > waits[0]  # it does back off
    assert waits[-1] == MAX_BACKOFF


def test_backoff_at_the_largest_retry_delay_is_one_hour() -> None:
    assert backoff(1, 3600) == MAX_BACKOFF
    assert backoff(10, 3600) == MAX_BACKOFF


def test_backoff_handles_a_huge_attempt_number() -> None:
    assert backoff(10**9, 1) == MAX_BACKOFF


# --- lease expiry -------------------------------------------------------------------------


@pytest.mark.parametrize("seconds", [5, 6, 300, 599, 600])
def test_lease_expiry_accepts_five_seconds_to_ten_minutes(seconds: int) -> None:
    assert lease_expiry(NOW, seconds) == NOW + timedelta(seconds=seconds)


@pytest.mark.parametrize("seconds", [-1, 0, 4, 601, 3600])
def test_lease_expiry_rejects_lease_seconds_out_of_range(seconds: int) -> None:
    with pytest.raises(InvalidArgument) as caught:
        lease_expiry(NOW, seconds)
    assert caught.value.field == "lease_seconds"
    assert caught.value.kind == "invalid_argument"


@given(seconds=st.integers(min_value=-(10**6), max_value=10**6))
def test_lease_expiry_never_clamps(seconds: int) -> None:
    try:
        expiry = lease_expiry(NOW, seconds)
    except InvalidArgument:
        assert not 5 <= seconds <= 600
    else:
        assert 5 <= seconds <= 600
        assert expiry - NOW == timedelta(seconds=seconds)


# --- lease_expired ------------------------------------------------------------------------


def test_lease_is_expired_exactly_at_its_expiry() -> None:
    assert lease_expired(facts(S.RUNNING, lease_expires_at=NOW), NOW) is True


def test_lease_is_expired_after_its_expiry() -> None:
    assert lease_expired(facts(S.RUNNING, lease_expires_at=NOW - TICK), NOW) is True


def test_lease_is_live_until_its_expiry() -> None:
    assert lease_expired(facts(S.RUNNING, lease_expires_at=NOW + TICK), NOW) is False


def test_running_without_a_lease_expiry_is_not_expired() -> None:
    assert lease_expired(facts(S.RUNNING, lease_expires_at=None), NOW) is False


@pytest.mark.parametrize("state", [s for s in OperationState if s is not S.RUNNING])
def test_only_a_running_operation_has_a_lease_to_expire(state: OperationState) -> None:
    assert lease_expired(facts(state, lease_expires_at=NOW - timedelta(hours=1)), NOW) is False


# --- deadline_passed ----------------------------------------------------------------------


@pytest.mark.parametrize("state", list(OperationState))
def test_deadline_passed_edges(state: OperationState) -> None:
    assert deadline_passed(facts(state, deadline_at=NOW), NOW) is True
    assert deadline_passed(facts(state, deadline_at=NOW - TICK), NOW) is True
    assert deadline_passed(facts(state, deadline_at=NOW + TICK), NOW) is False
    assert deadline_passed(facts(state, deadline_at=None), NOW) is False


# --- is_due -------------------------------------------------------------------------------


def test_waiting_for_retry_is_due_exactly_at_its_next_attempt() -> None:
    assert is_due(facts(S.WAITING_FOR_RETRY, next_attempt_at=NOW), NOW) is True


def test_waiting_for_retry_is_due_after_its_next_attempt() -> None:
    assert is_due(facts(S.WAITING_FOR_RETRY, next_attempt_at=NOW - TICK), NOW) is True


def test_waiting_for_retry_is_not_due_before_its_next_attempt() -> None:
    assert is_due(facts(S.WAITING_FOR_RETRY, next_attempt_at=NOW + TICK), NOW) is False


def test_waiting_for_retry_without_a_next_attempt_is_due() -> None:
    assert is_due(facts(S.WAITING_FOR_RETRY, next_attempt_at=None), NOW) is True


@pytest.mark.parametrize("state", [s for s in OperationState if s is not S.WAITING_FOR_RETRY])
def test_next_attempt_only_gates_waiting_for_retry(state: OperationState) -> None:
    assert is_due(facts(state, next_attempt_at=NOW + timedelta(hours=1)), NOW) is True
