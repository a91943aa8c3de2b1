"""The whole (state x event) matrix of SPEC §3, written out by hand.

The expected outcomes below come from the SPEC §3 table (and the lead's stated
choices where the SPEC is loose), not from reading ``lifecycle.py``. The matrix
holds exactly the transitions production makes: where production is narrower
than the SPEC table (ADR 0001: a claim reads one state, due retries are requeued
by the sweeper, a claim passes over a passed deadline), the cell is a refusal.

* a state: the event moves the operation there (``changed=True``);
* ``UNCHANGED``: accepted, but the row is left alone (heartbeat, exact duplicates);
* an error class: the event is refused with exactly that domain error.
"""

from __future__ import annotations

import contextlib
import itertools
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import pytest

from durable_ops.model.errors import DomainError, InvalidTransition, LeaseLost
from durable_ops.model.lifecycle import (
    CLAIMS,
    COMPLETION,
    CREATED,
    DEADLINE_FAILURE_CODE,
    LEASE_FAILURE_CODE,
    REQUEUE,
    AttemptOutcome,
    Decision,
    Event,
    Facts,
    Restart,
    Transition,
    attempt_outcome,
    decide,
    restart,
)
from durable_ops.model.states import OperationState

S = OperationState
E = Event

NOW: Final = datetime(2026, 8, 9, 12, 0, tzinfo=UTC)
FUTURE_DEADLINE: Final = NOW + timedelta(hours=1)
MAX_ATTEMPTS: Final = 3
RETRY_DELAY: Final = 5
MAX_BACKOFF: Final = timedelta(hours=1)


class _Unchanged:
    def __repr__(self) -> str:
        return "UNCHANGED"


UNCHANGED: Final = _Unchanged()
Expected = OperationState | _Unchanged | type[DomainError]


def base_facts(state: OperationState, **changes: Any) -> Facts:
    """A typical operation in ``state``: attempts left, no cancel, deadline ahead,
    a live lease when running, due when waiting for retry."""
    facts = Facts(
        state=state,
        attempt=0 if state is S.QUEUED else 1,
        max_attempts=MAX_ATTEMPTS,
        retry_delay_seconds=RETRY_DELAY,
        cancel_requested=False,
        deadline_at=FUTURE_DEADLINE,
        next_attempt_at=NOW - timedelta(seconds=1) if state is S.WAITING_FOR_RETRY else None,
        lease_expires_at=NOW + timedelta(seconds=60) if state is S.RUNNING else None,
    )
    return replace(facts, **changes)


# fmt: off
MATRIX: dict[tuple[OperationState, Event], Expected] = {
    # queued: claimed by the local route, cancellable at once, nothing for workers.
    (S.QUEUED, E.CLAIM):                S.RUNNING,
    (S.QUEUED, E.CLAIM_EXTERNAL):       InvalidTransition,  # that route takes only fallbacks
    (S.QUEUED, E.HEARTBEAT):            LeaseLost,
    (S.QUEUED, E.COMPLETE):             LeaseLost,
    (S.QUEUED, E.FAIL_RETRYABLE):       LeaseLost,
    (S.QUEUED, E.FAIL_PERMANENT):       LeaseLost,
    (S.QUEUED, E.REQUEST_FALLBACK):     LeaseLost,
    (S.QUEUED, E.ACKNOWLEDGE_CANCEL):   LeaseLost,
    (S.QUEUED, E.RELEASE):              UNCHANGED,  # duplicate of its own release
    (S.QUEUED, E.CANCEL):               S.CANCELLED,
    (S.QUEUED, E.RETRY):                InvalidTransition,
    (S.QUEUED, E.SWEEP):                InvalidTransition,  # deadline ahead: nothing to sweep
    # running, live lease, attempts left, no cancel requested.
    (S.RUNNING, E.CLAIM):               InvalidTransition,
    (S.RUNNING, E.CLAIM_EXTERNAL):      InvalidTransition,
    (S.RUNNING, E.HEARTBEAT):           UNCHANGED,
    (S.RUNNING, E.COMPLETE):            S.SUCCEEDED,
    (S.RUNNING, E.FAIL_RETRYABLE):      S.WAITING_FOR_RETRY,
    (S.RUNNING, E.FAIL_PERMANENT):      S.FAILED,
    (S.RUNNING, E.REQUEST_FALLBACK):    S.WAITING_FOR_EXTERNAL_FALLBACK,
    (S.RUNNING, E.ACKNOWLEDGE_CANCEL):  InvalidTransition,  # nothing was requested
    (S.RUNNING, E.RELEASE):             S.QUEUED,  # the worker stops: handed back
    (S.RUNNING, E.CANCEL):              S.RUNNING,  # cooperative: cancel_requested set
    (S.RUNNING, E.RETRY):               InvalidTransition,
    (S.RUNNING, E.SWEEP):               InvalidTransition,  # lease live
    # waiting_for_retry, due: never claimed from here; the sweep requeues it (ADR 0001).
    (S.WAITING_FOR_RETRY, E.CLAIM):              InvalidTransition,
    (S.WAITING_FOR_RETRY, E.CLAIM_EXTERNAL):     InvalidTransition,
    (S.WAITING_FOR_RETRY, E.HEARTBEAT):          LeaseLost,
    (S.WAITING_FOR_RETRY, E.COMPLETE):           LeaseLost,
    (S.WAITING_FOR_RETRY, E.FAIL_RETRYABLE):     UNCHANGED,  # duplicate of its own result
    (S.WAITING_FOR_RETRY, E.FAIL_PERMANENT):     LeaseLost,
    (S.WAITING_FOR_RETRY, E.REQUEST_FALLBACK):   LeaseLost,
    (S.WAITING_FOR_RETRY, E.ACKNOWLEDGE_CANCEL): LeaseLost,
    (S.WAITING_FOR_RETRY, E.RELEASE):            LeaseLost,
    (S.WAITING_FOR_RETRY, E.CANCEL):             S.CANCELLED,
    (S.WAITING_FOR_RETRY, E.RETRY):              InvalidTransition,
    (S.WAITING_FOR_RETRY, E.SWEEP):              S.QUEUED,  # due: requeued for the claim
    # waiting_for_external_fallback: only an external-route worker may claim it.
    (S.WAITING_FOR_EXTERNAL_FALLBACK, E.CLAIM):              InvalidTransition,
    (S.WAITING_FOR_EXTERNAL_FALLBACK, E.CLAIM_EXTERNAL):     S.RUNNING,
    (S.WAITING_FOR_EXTERNAL_FALLBACK, E.HEARTBEAT):          LeaseLost,
    (S.WAITING_FOR_EXTERNAL_FALLBACK, E.COMPLETE):           LeaseLost,
    (S.WAITING_FOR_EXTERNAL_FALLBACK, E.FAIL_RETRYABLE):     LeaseLost,
    (S.WAITING_FOR_EXTERNAL_FALLBACK, E.FAIL_PERMANENT):     LeaseLost,
    (S.WAITING_FOR_EXTERNAL_FALLBACK, E.REQUEST_FALLBACK):   UNCHANGED,  # duplicate
    (S.WAITING_FOR_EXTERNAL_FALLBACK, E.ACKNOWLEDGE_CANCEL): LeaseLost,
    (S.WAITING_FOR_EXTERNAL_FALLBACK, E.RELEASE):            LeaseLost,
    (S.WAITING_FOR_EXTERNAL_FALLBACK, E.CANCEL):             S.CANCELLED,
    (S.WAITING_FOR_EXTERNAL_FALLBACK, E.RETRY):              InvalidTransition,
    (S.WAITING_FOR_EXTERNAL_FALLBACK, E.SWEEP):              InvalidTransition,
    # succeeded: only an exact duplicate complete is accepted.
    (S.SUCCEEDED, E.CLAIM):               InvalidTransition,
    (S.SUCCEEDED, E.CLAIM_EXTERNAL):      InvalidTransition,
    (S.SUCCEEDED, E.HEARTBEAT):           LeaseLost,
    (S.SUCCEEDED, E.COMPLETE):            UNCHANGED,
    (S.SUCCEEDED, E.FAIL_RETRYABLE):      LeaseLost,
    (S.SUCCEEDED, E.FAIL_PERMANENT):      LeaseLost,
    (S.SUCCEEDED, E.REQUEST_FALLBACK):    LeaseLost,
    (S.SUCCEEDED, E.ACKNOWLEDGE_CANCEL):  LeaseLost,
    (S.SUCCEEDED, E.RELEASE):             LeaseLost,
    (S.SUCCEEDED, E.CANCEL):              InvalidTransition,  # already_terminal
    (S.SUCCEEDED, E.RETRY):               InvalidTransition,  # only failed/cancelled
    (S.SUCCEEDED, E.SWEEP):               InvalidTransition,
    # failed: duplicates of the failures that end here; retry re-queues.
    (S.FAILED, E.CLAIM):                  InvalidTransition,
    (S.FAILED, E.CLAIM_EXTERNAL):         InvalidTransition,
    (S.FAILED, E.HEARTBEAT):              LeaseLost,
    (S.FAILED, E.COMPLETE):               LeaseLost,
    (S.FAILED, E.FAIL_RETRYABLE):         UNCHANGED,  # the last attempt's duplicate
    (S.FAILED, E.FAIL_PERMANENT):         UNCHANGED,
    (S.FAILED, E.REQUEST_FALLBACK):       LeaseLost,
    (S.FAILED, E.ACKNOWLEDGE_CANCEL):     LeaseLost,
    (S.FAILED, E.RELEASE):                UNCHANGED,  # a release past the deadline
    (S.FAILED, E.CANCEL):                 InvalidTransition,  # already_terminal
    (S.FAILED, E.RETRY):                  S.QUEUED,
    (S.FAILED, E.SWEEP):                  InvalidTransition,
    # cancelled: duplicates of everything that ends in cancelled; retry re-queues.
    (S.CANCELLED, E.CLAIM):               InvalidTransition,
    (S.CANCELLED, E.CLAIM_EXTERNAL):      InvalidTransition,
    (S.CANCELLED, E.HEARTBEAT):           LeaseLost,
    (S.CANCELLED, E.COMPLETE):            LeaseLost,
    (S.CANCELLED, E.FAIL_RETRYABLE):      UNCHANGED,  # retryable failure under cancel
    (S.CANCELLED, E.FAIL_PERMANENT):      LeaseLost,
    (S.CANCELLED, E.REQUEST_FALLBACK):    UNCHANGED,  # fallback under cancel
    (S.CANCELLED, E.ACKNOWLEDGE_CANCEL):  UNCHANGED,
    (S.CANCELLED, E.RELEASE):             UNCHANGED,  # a release under cancel
    (S.CANCELLED, E.CANCEL):              UNCHANGED,  # owner's exact duplicate
    (S.CANCELLED, E.RETRY):               S.QUEUED,
    (S.CANCELLED, E.SWEEP):               InvalidTransition,
}
# fmt: on


def assert_unchanged(decision: Decision, facts: Facts) -> None:
    assert decision.changed is False
    assert (
        decision.state,
        decision.attempt,
        decision.cancel_requested,
        decision.next_attempt_at,
    ) == (facts.state, facts.attempt, facts.cancel_requested, facts.next_attempt_at)
    assert decision.notify is False
    assert decision.remove_notification is False
    assert decision.failure_code is None


def assert_refused(facts: Facts, event: Event, error: type[DomainError]) -> DomainError:
    with pytest.raises(DomainError) as caught:
        decide(facts, event, NOW)
    assert type(caught.value) is error, f"expected {error.__name__}, got {caught.value!r}"
    return caught.value


def test_matrix_covers_every_state_and_event() -> None:
    assert set(MATRIX) == set(itertools.product(OperationState, Event))
    assert len(MATRIX) == len(OperationState) * len(Event) == 84


@pytest.mark.parametrize(
    ("state", "event"), sorted(MATRIX), ids=[f"{s}-{e}" for s, e in sorted(MATRIX)]
)
def test_matrix(state: OperationState, event: Event) -> None:
    expected = MATRIX[(state, event)]
    facts = base_facts(state)
    if isinstance(expected, type):
        assert_refused(facts, event, expected)
        return
    decision = decide(facts, event, NOW)
    if isinstance(expected, _Unchanged):
        assert_unchanged(decision, facts)
        return
    assert decision.changed is True
    assert decision.state is expected
    assert decision.notify is (expected.is_terminal and not state.is_terminal)


# --- attempts left vs exhausted -----------------------------------------------------------


def test_a_release_queues_at_once_and_gives_the_attempt_back() -> None:
    running = base_facts(S.RUNNING, attempt=2)
    released = decide(running, E.RELEASE, NOW)
    assert (released.state, released.attempt, released.next_attempt_at) == (S.QUEUED, 1, None)
    assert (released.notify, released.failure_code, released.changed) == (False, None, True)
    # The next claim is the same attempt again: the release spent nothing.
    assert decide(base_facts(S.QUEUED, attempt=released.attempt), E.CLAIM, NOW).attempt == 2


def test_a_release_on_the_last_attempt_still_queues() -> None:
    last = base_facts(S.RUNNING, attempt=MAX_ATTEMPTS)
    assert decide(last, E.RELEASE, NOW).state is S.QUEUED


def test_a_release_of_an_expired_lease_is_lease_lost() -> None:
    expired = base_facts(S.RUNNING, lease_expires_at=NOW - timedelta(microseconds=1))
    assert assert_refused(expired, E.RELEASE, LeaseLost).code == "lease_lost"


def test_a_release_under_the_owners_cancel_ends_cancelled() -> None:
    released = decide(base_facts(S.RUNNING, cancel_requested=True), E.RELEASE, NOW)
    assert (released.state, released.notify) == (S.CANCELLED, True)
    assert attempt_outcome(S.RUNNING, E.RELEASE, released) is AttemptOutcome.CANCELLED


def test_a_release_after_the_deadline_fails_closed() -> None:
    late = base_facts(S.RUNNING, deadline_at=NOW - timedelta(seconds=1))
    released = decide(late, E.RELEASE, NOW)
    assert (released.state, released.failure_code) == (S.FAILED, DEADLINE_FAILURE_CODE)
    assert attempt_outcome(S.RUNNING, E.RELEASE, released) is AttemptOutcome.DEADLINE


def test_the_attempt_history_records_a_release_as_released() -> None:
    released = decide(base_facts(S.RUNNING), E.RELEASE, NOW)
    assert attempt_outcome(S.RUNNING, E.RELEASE, released) is AttemptOutcome.RELEASED


def test_fail_retryable_with_attempts_left_waits_for_a_bounded_backoff() -> None:
    facts = base_facts(S.RUNNING, attempt=2)
    decision = decide(facts, E.FAIL_RETRYABLE, NOW)
    assert decision.state is S.WAITING_FOR_RETRY
    assert decision.attempt == 2
    assert decision.notify is False
    assert decision.next_attempt_at is not None
    wait = decision.next_attempt_at - NOW
    assert timedelta(seconds=RETRY_DELAY) <= wait <= MAX_BACKOFF


def test_fail_retryable_on_the_last_attempt_fails_with_notification() -> None:
    decision = decide(base_facts(S.RUNNING, attempt=MAX_ATTEMPTS), E.FAIL_RETRYABLE, NOW)
    assert decision.state is S.FAILED
    assert decision.notify is True
    assert decision.next_attempt_at is None


def test_single_attempt_budget_fails_on_the_first_retryable_failure() -> None:
    facts = base_facts(S.RUNNING, attempt=1, max_attempts=1)
    assert decide(facts, E.FAIL_RETRYABLE, NOW).state is S.FAILED


def test_fail_permanent_fails_even_with_attempts_left() -> None:
    decision = decide(base_facts(S.RUNNING, attempt=1), E.FAIL_PERMANENT, NOW)
    assert decision.state is S.FAILED
    assert decision.notify is True


# --- cancel requested ---------------------------------------------------------------------


def test_owner_cancel_on_running_sets_cancel_requested_and_stays_running() -> None:
    decision = decide(base_facts(S.RUNNING), E.CANCEL, NOW)
    assert decision.changed is True
    assert decision.state is S.RUNNING
    assert decision.cancel_requested is True
    assert decision.notify is False


def test_owner_cancel_on_running_with_cancel_already_requested_is_a_noop() -> None:
    facts = base_facts(S.RUNNING, cancel_requested=True)
    assert_unchanged(decide(facts, E.CANCEL, NOW), facts)


def test_owner_cancel_does_not_need_a_live_lease() -> None:
    facts = base_facts(S.RUNNING, lease_expires_at=NOW - timedelta(seconds=1))
    decision = decide(facts, E.CANCEL, NOW)
    assert (decision.state, decision.cancel_requested) == (S.RUNNING, True)


@pytest.mark.parametrize("state", [S.QUEUED, S.WAITING_FOR_RETRY, S.WAITING_FOR_EXTERNAL_FALLBACK])
def test_owner_cancel_before_execution_is_immediate(state: OperationState) -> None:
    decision = decide(base_facts(state), E.CANCEL, NOW)
    assert decision.state is S.CANCELLED
    assert decision.notify is True
    assert decision.next_attempt_at is None


@pytest.mark.parametrize("state", [S.SUCCEEDED, S.FAILED])
def test_owner_cancel_on_succeeded_or_failed_is_already_terminal(state: OperationState) -> None:
    error = assert_refused(base_facts(state), E.CANCEL, InvalidTransition)
    assert error.code == "already_terminal"
    assert error.kind == "failed_precondition"


def test_owner_cancel_on_cancelled_is_an_exact_duplicate() -> None:
    facts = base_facts(S.CANCELLED, cancel_requested=True)
    assert_unchanged(decide(facts, E.CANCEL, NOW), facts)


@pytest.mark.parametrize("cancel_requested", [False, True])
def test_heartbeat_reports_whether_cancel_was_requested(cancel_requested: bool) -> None:
    facts = base_facts(S.RUNNING, cancel_requested=cancel_requested)
    decision = decide(facts, E.HEARTBEAT, NOW)
    assert_unchanged(decision, facts)
    assert decision.cancel_requested is cancel_requested


def test_acknowledge_cancel_when_requested_ends_cancelled() -> None:
    decision = decide(base_facts(S.RUNNING, cancel_requested=True), E.ACKNOWLEDGE_CANCEL, NOW)
    assert decision.state is S.CANCELLED
    assert decision.notify is True


@pytest.mark.parametrize("attempt", [1, MAX_ATTEMPTS])
def test_retryable_failure_under_cancel_ends_cancelled(attempt: int) -> None:
    facts = base_facts(S.RUNNING, attempt=attempt, cancel_requested=True)
    decision = decide(facts, E.FAIL_RETRYABLE, NOW)
    assert decision.state is S.CANCELLED
    assert decision.notify is True


def test_fallback_request_under_cancel_ends_cancelled() -> None:
    facts = base_facts(S.RUNNING, cancel_requested=True)
    decision = decide(facts, E.REQUEST_FALLBACK, NOW)
    assert decision.state is S.CANCELLED
    assert decision.notify is True


def test_complete_under_cancel_still_succeeds() -> None:
    # SPEC: running + complete -> succeeded, with no exception for a pending cancel.
    facts = base_facts(S.RUNNING, cancel_requested=True)
    assert decide(facts, E.COMPLETE, NOW).state is S.SUCCEEDED


# --- lease expired vs live for worker events ----------------------------------------------

WORKER_EVENTS: Final = [
    E.HEARTBEAT,
    E.COMPLETE,
    E.FAIL_RETRYABLE,
    E.FAIL_PERMANENT,
    E.REQUEST_FALLBACK,
    E.ACKNOWLEDGE_CANCEL,
    E.RELEASE,
]


@pytest.mark.parametrize("event", WORKER_EVENTS)
@pytest.mark.parametrize("expired_for", [timedelta(0), timedelta(seconds=1)], ids=["at-now", "1s"])
def test_worker_events_on_an_expired_lease_are_lease_lost(
    event: Event, expired_for: timedelta
) -> None:
    facts = base_facts(S.RUNNING, cancel_requested=True, lease_expires_at=NOW - expired_for)
    error = assert_refused(facts, event, LeaseLost)
    assert error.code == "lease_lost"
    assert error.kind == "aborted"


@pytest.mark.parametrize("event", WORKER_EVENTS)
def test_worker_events_on_a_lease_live_for_one_more_microsecond_are_accepted(
    event: Event,
) -> None:
    facts = base_facts(
        S.RUNNING, cancel_requested=True, lease_expires_at=NOW + timedelta(microseconds=1)
    )
    decide(facts, event, NOW)


# --- waiting_for_retry due vs not due -----------------------------------------------------


@pytest.mark.parametrize("event", [E.CLAIM, E.CLAIM_EXTERNAL])
@pytest.mark.parametrize("due_in", [timedelta(0), -timedelta(seconds=1)], ids=["at-now", "past"])
def test_a_due_retry_is_requeued_by_the_sweep_then_claimed(event: Event, due_in: timedelta) -> None:
    facts = base_facts(S.WAITING_FOR_RETRY, attempt=1, next_attempt_at=NOW + due_in)
    assert_refused(facts, event, InvalidTransition)
    requeued = decide(facts, E.SWEEP, NOW)
    claimed = decide(base_facts(requeued.state, attempt=requeued.attempt), E.CLAIM, NOW)
    assert (claimed.state, claimed.attempt, claimed.next_attempt_at) == (S.RUNNING, 2, None)


@pytest.mark.parametrize("event", [E.CLAIM, E.CLAIM_EXTERNAL, E.SWEEP])
def test_waiting_for_retry_not_yet_due_is_left_alone(event: Event) -> None:
    facts = base_facts(S.WAITING_FOR_RETRY, next_attempt_at=NOW + timedelta(microseconds=1))
    assert_refused(facts, event, InvalidTransition)


def test_sweep_requeues_a_due_retry_without_touching_its_attempt() -> None:
    facts = base_facts(S.WAITING_FOR_RETRY, attempt=2, next_attempt_at=NOW)
    decision = decide(facts, E.SWEEP, NOW)
    assert (decision.state, decision.attempt, decision.next_attempt_at) == (S.QUEUED, 2, None)
    assert decision.notify is False


# --- claims -------------------------------------------------------------------------------


def test_claim_from_queued_starts_the_first_attempt() -> None:
    decision = decide(base_facts(S.QUEUED), E.CLAIM, NOW)
    assert (decision.state, decision.attempt, decision.cancel_requested) == (S.RUNNING, 1, False)
    assert decision.notify is False


def test_the_external_route_claims_no_queued_operation() -> None:
    # Queued work is the local route's; the external one serves only what fell back to it.
    assert_refused(base_facts(S.QUEUED), E.CLAIM_EXTERNAL, InvalidTransition)


def test_fallback_claim_only_by_the_external_route_and_keeps_the_attempt() -> None:
    facts = base_facts(S.WAITING_FOR_EXTERNAL_FALLBACK, attempt=2)
    assert_refused(facts, E.CLAIM, InvalidTransition)
    decision = decide(facts, E.CLAIM_EXTERNAL, NOW)
    assert decision.state is S.RUNNING
    assert decision.attempt == 2


def test_fallback_round_trip_keeps_the_attempt_number() -> None:
    running = base_facts(S.RUNNING, attempt=2)
    to_fallback = decide(running, E.REQUEST_FALLBACK, NOW)
    assert to_fallback.state is S.WAITING_FOR_EXTERNAL_FALLBACK
    assert to_fallback.attempt == 2
    assert to_fallback.notify is False
    waiting = base_facts(S.WAITING_FOR_EXTERNAL_FALLBACK, attempt=to_fallback.attempt)
    assert decide(waiting, E.CLAIM_EXTERNAL, NOW).attempt == 2


# --- deadline passed: the claim passes over, the sweep fails closed -----------------------

DEADLINE_PASSED: Final = [timedelta(0), timedelta(seconds=1)]
PENDING_CLAIMS: Final = [
    (S.QUEUED, E.CLAIM),
    (S.WAITING_FOR_EXTERNAL_FALLBACK, E.CLAIM_EXTERNAL),
]


@pytest.mark.parametrize(("state", "event"), PENDING_CLAIMS)
@pytest.mark.parametrize("passed_by", DEADLINE_PASSED, ids=["at-now", "1s"])
def test_claim_after_the_deadline_is_refused_and_the_sweep_fails_it_closed(
    state: OperationState, event: Event, passed_by: timedelta
) -> None:
    # SPEC lets the claim fail it too; production's claim skips it (its SELECT filters
    # passed deadlines) and leaves it to the sweeper, so the model refuses the claim.
    facts = base_facts(state, deadline_at=NOW - passed_by)
    assert_refused(facts, event, InvalidTransition)
    decision = decide(facts, E.SWEEP, NOW)
    assert decision.state is S.FAILED
    assert decision.failure_code == DEADLINE_FAILURE_CODE == "deadline_exceeded"
    assert decision.notify is True
    assert decision.attempt == facts.attempt  # no attempt was started


@pytest.mark.parametrize(
    ("state", "next_attempt_at"),
    [
        (S.QUEUED, None),
        (S.WAITING_FOR_RETRY, NOW - timedelta(seconds=1)),
        (S.WAITING_FOR_RETRY, NOW + timedelta(minutes=5)),  # not due yet: sweep still fails it
        (S.WAITING_FOR_EXTERNAL_FALLBACK, None),
    ],
)
@pytest.mark.parametrize("passed_by", DEADLINE_PASSED, ids=["at-now", "1s"])
def test_sweep_after_the_deadline_fails_pending_operations_closed(
    state: OperationState, next_attempt_at: datetime | None, passed_by: timedelta
) -> None:
    facts = base_facts(state, deadline_at=NOW - passed_by, next_attempt_at=next_attempt_at)
    decision = decide(facts, E.SWEEP, NOW)
    assert decision.state is S.FAILED
    assert decision.failure_code == "deadline_exceeded"
    assert decision.notify is True


@pytest.mark.parametrize("state", [S.QUEUED, S.WAITING_FOR_RETRY, S.WAITING_FOR_EXTERNAL_FALLBACK])
def test_sweep_before_the_deadline_or_without_one_has_nothing_to_do(
    state: OperationState,
) -> None:
    later = NOW + timedelta(seconds=1)  # a due retry would be requeued; this one is not due
    for deadline in (NOW + timedelta(microseconds=1), None):
        facts = base_facts(state, deadline_at=deadline, next_attempt_at=later)
        assert_refused(facts, E.SWEEP, InvalidTransition)


# --- sweep of an expired lease ------------------------------------------------------------


def expired(**changes: Any) -> Facts:
    return base_facts(S.RUNNING, lease_expires_at=NOW - timedelta(seconds=1), **changes)


def test_sweep_expired_lease_with_attempts_left_waits_for_retry() -> None:
    decision = decide(expired(attempt=1), E.SWEEP, NOW)
    assert decision.state is S.WAITING_FOR_RETRY
    assert decision.failure_code == LEASE_FAILURE_CODE == "lease_expired"
    assert decision.notify is False
    assert decision.attempt == 1
    assert decision.next_attempt_at is not None
    assert timedelta(seconds=RETRY_DELAY) <= decision.next_attempt_at - NOW <= MAX_BACKOFF


def test_sweep_expired_lease_on_the_last_attempt_fails() -> None:
    decision = decide(expired(attempt=MAX_ATTEMPTS), E.SWEEP, NOW)
    assert decision.state is S.FAILED
    assert decision.failure_code == "lease_expired"
    assert decision.notify is True


@pytest.mark.parametrize("attempt", [1, MAX_ATTEMPTS])
def test_sweep_expired_lease_with_cancel_requested_converges_to_cancelled(attempt: int) -> None:
    decision = decide(expired(attempt=attempt, cancel_requested=True), E.SWEEP, NOW)
    assert decision.state is S.CANCELLED
    assert decision.notify is True


def test_sweep_expired_lease_exactly_at_now() -> None:
    facts = base_facts(S.RUNNING, lease_expires_at=NOW)
    assert decide(facts, E.SWEEP, NOW).state is S.WAITING_FOR_RETRY


def test_sweep_expired_lease_after_the_deadline_fails_closed() -> None:
    decision = decide(expired(attempt=1, deadline_at=NOW), E.SWEEP, NOW)
    assert decision.state is S.FAILED
    assert decision.failure_code == "deadline_exceeded"
    assert decision.notify is True


def test_sweep_expired_lease_after_the_deadline_with_cancel_requested_is_cancelled() -> None:
    decision = decide(expired(deadline_at=NOW, cancel_requested=True), E.SWEEP, NOW)
    assert decision.state is S.CANCELLED


@pytest.mark.parametrize("lease_expires_at", [NOW + timedelta(microseconds=1), None])
def test_sweep_of_running_without_an_expired_lease_is_refused(
    lease_expires_at: datetime | None,
) -> None:
    # Even past its deadline: a live lease belongs to the worker, which enforces its timeout.
    facts = base_facts(S.RUNNING, lease_expires_at=lease_expires_at, deadline_at=NOW)
    assert_refused(facts, E.SWEEP, InvalidTransition)


# --- retry --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "facts",
    [
        base_facts(S.FAILED, attempt=MAX_ATTEMPTS),
        base_facts(S.CANCELLED, attempt=2, cancel_requested=True),
    ],
    ids=["failed", "cancelled"],
)
def test_retry_requeues_with_a_fresh_budget_and_removes_the_notification(facts: Facts) -> None:
    decision = decide(facts, E.RETRY, NOW)
    assert decision.changed is True
    assert decision.state is S.QUEUED
    assert decision.attempt == 0
    assert decision.cancel_requested is False
    assert decision.next_attempt_at is None
    assert decision.remove_notification is True
    assert decision.notify is False
    assert decision.failure_code is None


def test_after_retry_the_whole_attempt_budget_is_available_again() -> None:
    retried = decide(base_facts(S.FAILED, attempt=MAX_ATTEMPTS), E.RETRY, NOW)
    state, attempt = retried.state, retried.attempt
    for expected_attempt in range(1, MAX_ATTEMPTS):
        claimed = decide(base_facts(state, attempt=attempt), E.CLAIM, NOW)
        assert claimed.attempt == expected_attempt
        failed = decide(base_facts(S.RUNNING, attempt=claimed.attempt), E.FAIL_RETRYABLE, NOW)
        assert failed.state is S.WAITING_FOR_RETRY
        requeued = decide(base_facts(failed.state, attempt=failed.attempt), E.SWEEP, NOW)
        state, attempt = requeued.state, requeued.attempt
    last = decide(base_facts(state, attempt=attempt), E.CLAIM, NOW)
    assert last.attempt == MAX_ATTEMPTS
    assert decide(base_facts(S.RUNNING, attempt=last.attempt), E.FAIL_RETRYABLE, NOW).state is (
        S.FAILED
    )


BUDGET: Final = timedelta(minutes=30)


def test_a_retry_before_its_scheduled_time_keeps_it_and_its_deadline_counts_from_it() -> None:
    scheduled = NOW + timedelta(days=2)
    again = restart(
        now=NOW,
        not_before=scheduled,
        time_budget_seconds=int(BUDGET.total_seconds()),
        deadline_at=scheduled + BUDGET,
    )
    assert again == Restart(runs_at=scheduled, deadline_at=scheduled + BUDGET)


@pytest.mark.parametrize("since", [timedelta(0), timedelta(seconds=1), timedelta(days=3)])
def test_a_retry_at_or_after_its_time_runs_now_with_a_new_deadline(since: timedelta) -> None:
    again = restart(
        now=NOW,
        not_before=NOW - since,
        time_budget_seconds=int(BUDGET.total_seconds()),
        deadline_at=NOW - since + BUDGET,
    )
    assert again == Restart(runs_at=NOW, deadline_at=NOW + BUDGET)


@pytest.mark.parametrize("deadline", [None, FUTURE_DEADLINE, NOW - timedelta(minutes=1)])
def test_without_a_time_budget_a_retry_keeps_its_deadline(deadline: datetime | None) -> None:
    scheduled = NOW + timedelta(minutes=5)
    again = restart(now=NOW, not_before=scheduled, time_budget_seconds=None, deadline_at=deadline)
    assert again == Restart(runs_at=scheduled, deadline_at=deadline)


@pytest.mark.parametrize("state", [s for s in OperationState if s not in (S.FAILED, S.CANCELLED)])
def test_retry_from_any_other_state_is_not_retryable(state: OperationState) -> None:
    error = assert_refused(base_facts(state), E.RETRY, InvalidTransition)
    assert error.code == "not_retryable"


# --- worker events on a non-running operation ---------------------------------------------


@pytest.mark.parametrize("state", [s for s in OperationState if s is not S.RUNNING])
@pytest.mark.parametrize("event", WORKER_EVENTS)
def test_worker_events_off_running_are_lease_lost_unless_an_exact_duplicate(
    state: OperationState, event: Event
) -> None:
    expected = MATRIX[(state, event)]
    facts = base_facts(state)
    if expected is UNCHANGED:
        assert_unchanged(decide(facts, event, NOW), facts)
    else:
        assert expected is LeaseLost
        assert assert_refused(facts, event, LeaseLost).code == "lease_lost"


# --- invariants over many facts -----------------------------------------------------------


def fact_variants() -> list[Facts]:
    variants = []
    for state, cancel, attempt, lease, deadline, next_attempt in itertools.product(
        OperationState,
        [False, True],
        [1, MAX_ATTEMPTS],
        [None, NOW - timedelta(seconds=1), NOW + timedelta(seconds=30)],
        [None, NOW - timedelta(seconds=1), FUTURE_DEADLINE],
        [None, NOW - timedelta(seconds=1), NOW + timedelta(seconds=30)],
    ):
        variants.append(
            base_facts(
                state,
                cancel_requested=cancel,
                attempt=attempt,
                lease_expires_at=lease,
                deadline_at=deadline,
                next_attempt_at=next_attempt,
            )
        )
    return variants


def all_decisions() -> list[tuple[Facts, Event, Decision]]:
    decisions = []
    for facts in fact_variants():
        for event in Event:
            with contextlib.suppress(InvalidTransition, LeaseLost):
                decisions.append((facts, event, decide(facts, event, NOW)))
    return decisions


ALL_DECISIONS: Final = all_decisions()


def test_invariants_cover_a_meaningful_number_of_decisions() -> None:
    assert len(ALL_DECISIONS) > 1000
    moved_to = {d.state for f, _, d in ALL_DECISIONS if d.changed and d.state is not f.state}
    assert moved_to == set(OperationState)


def test_every_move_into_a_terminal_state_notifies_and_nothing_else_does() -> None:
    for facts, event, decision in ALL_DECISIONS:
        context = (facts, event, decision)
        entered_terminal = decision.changed and decision.state.is_terminal
        assert decision.notify is entered_terminal, context
        if entered_terminal:
            assert not facts.state.is_terminal, context  # never terminal -> terminal


def test_unchanged_decisions_never_notify_nor_touch_the_row() -> None:
    unchanged = [(f, e, d) for f, e, d in ALL_DECISIONS if not d.changed]
    assert unchanged
    for facts, _, decision in unchanged:
        assert_unchanged(decision, facts)


def test_only_retry_removes_the_notification() -> None:
    for _, event, decision in ALL_DECISIONS:
        assert decision.remove_notification is (event is E.RETRY), (event, decision)


def test_failure_codes_come_only_from_sweep_and_deadline_checks() -> None:
    for facts, event, decision in ALL_DECISIONS:
        context = (facts, event, decision)
        if decision.failure_code == "lease_expired":
            assert event is E.SWEEP, context
            assert decision.state in (S.WAITING_FOR_RETRY, S.FAILED), context
        elif decision.failure_code == "deadline_exceeded":
            assert event in (E.SWEEP, E.RELEASE), context
            assert decision.state is S.FAILED, context
        else:
            assert decision.failure_code is None, context


def test_only_waiting_for_retry_keeps_a_next_attempt_time() -> None:
    for _, _, decision in ALL_DECISIONS:
        if decision.changed and decision.state is not S.WAITING_FOR_RETRY:
            assert decision.next_attempt_at is None, decision


# --- the fast paths: the constants storage's pre-built statements are filled from -----------
# Create, claim, completion and the requeue of a due retry do not call ``decide``:
# storage writes these constants. They are pinned here by hand and tied to the matrix
# and to ``decide``, so a statement cannot write what the model would not decide.

FAST_PATHS: Final = [
    (E.CLAIM, CLAIMS[E.CLAIM]),
    (E.CLAIM_EXTERNAL, CLAIMS[E.CLAIM_EXTERNAL]),
    (E.COMPLETE, COMPLETION),
    (E.SWEEP, REQUEUE),
]


def test_the_fast_path_constants() -> None:
    assert {
        E.CLAIM: Transition(S.QUEUED, S.RUNNING, starts_attempt=True),
        E.CLAIM_EXTERNAL: Transition(S.WAITING_FOR_EXTERNAL_FALLBACK, S.RUNNING),
    } == CLAIMS
    assert Transition(S.RUNNING, S.SUCCEEDED) == COMPLETION
    assert Transition(S.WAITING_FOR_RETRY, S.QUEUED) == REQUEUE
    assert [t.notify for _, t in FAST_PATHS] == [False, False, True, False]
    assert [t.attempt_after(2) for _, t in FAST_PATHS] == [3, 2, 2, 2]
    assert Decision(S.QUEUED, 0, False, None) == CREATED  # no notification, nothing removed


@pytest.mark.parametrize(("event", "transition"), FAST_PATHS)
def test_each_fast_path_is_its_cell_of_the_matrix(event: Event, transition: Transition) -> None:
    assert MATRIX[(transition.source, event)] is transition.target


@pytest.mark.parametrize("event", sorted(CLAIMS))
def test_a_claim_takes_only_the_state_storage_reads(event: Event) -> None:
    claimable = {state for state in OperationState if MATRIX[(state, event)] is S.RUNNING}
    assert claimable == {CLAIMS[event].source}


@pytest.mark.parametrize(("event", "transition"), FAST_PATHS)
@pytest.mark.parametrize("attempt", [0, 1, MAX_ATTEMPTS - 1])
@pytest.mark.parametrize("cancel_requested", [False, True])
def test_decide_answers_a_fast_path_with_what_its_statement_writes(
    event: Event, transition: Transition, attempt: int, cancel_requested: bool
) -> None:
    facts = base_facts(transition.source, attempt=attempt, cancel_requested=cancel_requested)
    decision = decide(facts, event, NOW)
    assert decision == transition.decision(facts)
    # What the statement writes, or leaves alone (the cancellation flag).
    assert (decision.state, decision.attempt, decision.next_attempt_at) == (
        transition.target,
        transition.attempt_after(attempt),
        None,
    )
    assert decision.cancel_requested is cancel_requested
    assert decision.notify is transition.notify
    assert (decision.failure_code, decision.remove_notification) == (None, False)


def test_a_manual_retry_starts_over_from_what_a_create_writes() -> None:
    decision = decide(base_facts(S.FAILED, attempt=MAX_ATTEMPTS), E.RETRY, NOW)
    assert decision == replace(CREATED, remove_notification=True)
