"""A retryable failure's ``retry_after`` (a model provider's Retry-After), as the rules read it.

The next attempt waits for the later of the operation's own jittered retry wait and the
hint. A hint that puts the retry at or past the deadline makes it pointless: the
operation fails now, with the failure's own code, as when no attempt is left.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import pytest

from durable_ops.model import bounds, lifecycle
from durable_ops.model.errors import InvalidArgument
from durable_ops.model.lifecycle import AttemptOutcome, Event, Facts, attempt_outcome, decide
from durable_ops.model.states import OperationState

S = OperationState
NOW: Final = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
HOUR: Final = timedelta(hours=1)


def running(**changes: Any) -> Facts:
    facts = Facts(
        state=S.RUNNING,
        attempt=1,
        max_attempts=3,
        retry_delay_seconds=5,
        deadline_at=NOW + 2 * HOUR,
        lease_expires_at=NOW + timedelta(seconds=60),
    )
    return replace(facts, **changes)


def fixed(value: float) -> lifecycle.Draw:
    return lambda: value


def fail(facts: Facts, retry_after: timedelta | None) -> lifecycle.Decision:
    return decide(facts, Event.FAIL_RETRYABLE, NOW, fixed(0.5), retry_after=retry_after)


def test_a_hint_longer_than_the_own_wait_sets_the_next_attempt() -> None:
    decision = fail(running(), HOUR)
    assert (decision.state, decision.next_attempt_at) == (S.WAITING_FOR_RETRY, NOW + HOUR)
    assert (decision.failure_code, decision.notify) == (None, False)


@pytest.mark.parametrize("hint", [timedelta(seconds=1), timedelta(seconds=5)])
def test_a_hint_shorter_than_the_own_wait_changes_nothing(hint: timedelta) -> None:
    own = fail(running(), None)
    assert own.next_attempt_at is not None
    assert own.next_attempt_at - NOW > hint
    assert fail(running(), hint) == own


def test_without_a_deadline_any_hint_is_waited_for() -> None:
    decision = fail(running(deadline_at=None), timedelta(days=1))
    assert (decision.state, decision.next_attempt_at) == (S.WAITING_FOR_RETRY, NOW + 24 * HOUR)


@pytest.mark.parametrize("past", [timedelta(0), timedelta(seconds=1), HOUR])
def test_a_hint_at_or_past_the_deadline_fails_now_with_the_failures_own_code(
    past: timedelta,
) -> None:
    facts = running(deadline_at=NOW + HOUR - past)
    decision = fail(facts, HOUR)
    # As when no attempt is left: the worker's code stays (the rules add none), the
    # owner is told now, and the attempt is a retryable failure, not a deadline.
    assert (decision.state, decision.failure_code) == (S.FAILED, None)
    assert (decision.notify, decision.next_attempt_at) == (True, None)
    outcome = attempt_outcome(S.RUNNING, Event.FAIL_RETRYABLE, decision)
    assert outcome is AttemptOutcome.FAILED_RETRYABLE


def test_a_hint_just_before_the_deadline_still_waits() -> None:
    facts = running(deadline_at=NOW + HOUR + timedelta(microseconds=1))
    assert fail(facts, HOUR).state is S.WAITING_FOR_RETRY


def test_the_last_attempt_fails_and_a_requested_cancel_cancels_whatever_the_hint() -> None:
    assert fail(running(attempt=3), HOUR).state is S.FAILED
    assert fail(running(cancel_requested=True), 3 * HOUR).state is S.CANCELLED


@pytest.mark.parametrize("hint", [timedelta(seconds=1), timedelta(days=1)])
def test_the_hints_bounds_are_one_second_to_a_day(hint: timedelta) -> None:
    assert bounds.retry_after(hint) == hint


@pytest.mark.parametrize(
    "hint",
    [timedelta(0), timedelta(milliseconds=999), timedelta(days=1, microseconds=1), -HOUR],
)
def test_a_hint_out_of_its_bounds_is_refused_with_its_code(hint: timedelta) -> None:
    with pytest.raises(InvalidArgument) as refused:
        bounds.retry_after(hint)
    assert (refused.value.field, refused.value.code) == ("retry_after", "retry_after_out_of_range")
