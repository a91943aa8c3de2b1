"""The operation lifecycle of SPEC §3 as pure decisions: every state change is decided here.

``decide(facts, event, now)`` answers, for one operation and one event, what the
operation becomes, or raises why the event is refused. Storage reads the
facts (or guards on them in SQL) and applies the decision with a guarded
UPDATE; it never decides anything itself.

The hot paths (create, claim, completion, requeueing a due retry) are pre-built
statements that do not read the row into ``Facts`` first. Their rules are the
constants ``CREATED``, ``CLAIMS``, ``COMPLETION`` and ``REQUEUE``: storage fills
its statements from them (the states read and written, the attempt, the
notification) and ``decide`` answers with the same constants, so each
transition has one rule.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Final

from durable_ops.model import bounds
from durable_ops.model.errors import InvalidTransition, LeaseLost
from durable_ops.model.states import PENDING_STATES, OperationState

S = OperationState

DEADLINE_FAILURE_CODE = "deadline_exceeded"
LEASE_FAILURE_CODE = "lease_expired"


class Event(StrEnum):
    CLAIM = "claim"  # a local-route worker
    CLAIM_EXTERNAL = "claim_external"  # a worker holding the external route
    HEARTBEAT = "heartbeat"
    COMPLETE = "complete"
    FAIL_RETRYABLE = "fail_retryable"
    FAIL_PERMANENT = "fail_permanent"
    REQUEST_FALLBACK = "request_fallback"
    ACKNOWLEDGE_CANCEL = "acknowledge_cancel"
    RELEASE = "release"  # a stopping worker hands the lease back unfinished
    CANCEL = "cancel"  # the owner
    RETRY = "retry"  # the owner
    SWEEP = "sweep"  # the sweeper: lease expiry or deadline


WORKER_EVENTS = frozenset(
    {
        Event.HEARTBEAT,
        Event.COMPLETE,
        Event.FAIL_RETRYABLE,
        Event.FAIL_PERMANENT,
        Event.REQUEST_FALLBACK,
        Event.ACKNOWLEDGE_CANCEL,
        Event.RELEASE,
    }
)

# States that an exact repeat of a lease-holder's terminal call may find. The
# lease token must still match (storage checks it): a re-claim replaces it.
DUPLICATE_RESULTS: dict[Event, frozenset[OperationState]] = {
    Event.COMPLETE: frozenset({S.SUCCEEDED}),
    Event.FAIL_PERMANENT: frozenset({S.FAILED}),
    Event.FAIL_RETRYABLE: frozenset({S.WAITING_FOR_RETRY, S.FAILED, S.CANCELLED}),
    Event.REQUEST_FALLBACK: frozenset({S.WAITING_FOR_EXTERNAL_FALLBACK, S.CANCELLED}),
    Event.ACKNOWLEDGE_CANCEL: frozenset({S.CANCELLED}),
    Event.RELEASE: frozenset({S.QUEUED, S.CANCELLED, S.FAILED}),
}


@dataclass(frozen=True)
class Facts:
    """What the rules need to know about one operation."""

    state: OperationState
    attempt: int
    max_attempts: int
    retry_delay_seconds: int
    cancel_requested: bool = False
    deadline_at: datetime | None = None
    next_attempt_at: datetime | None = None
    lease_expires_at: datetime | None = None


@dataclass(frozen=True)
class Decision:
    """What an operation becomes. ``changed=False`` means: leave the row alone."""

    state: OperationState
    attempt: int
    cancel_requested: bool
    next_attempt_at: datetime | None
    notify: bool = False  # write the one terminal notification in the same transaction
    failure_code: str | None = None  # set when the rules themselves fail the operation
    remove_notification: bool = False
    changed: bool = True

    @property
    def terminal(self) -> bool:
        return self.state.is_terminal


@dataclass(frozen=True)
class Transition:
    """A state change a pre-built statement applies without reading the row's facts.

    Its outcome needs only the state it leaves (the statement's guard, with in
    SQL whatever else ``decide`` checks first) and the attempt it counts from.
    Storage fills the statement from these fields and ``decide`` answers with
    ``decision``, so the two cannot disagree.
    """

    source: OperationState
    target: OperationState
    starts_attempt: bool = False

    @property
    def notify(self) -> bool:
        return self.target.is_terminal

    def attempt_after(self, attempt: int) -> int:
        return attempt + 1 if self.starts_attempt else attempt

    def decision(self, facts: Facts) -> Decision:
        # Like the statements: the cancel flag is left alone, no next attempt time is kept.
        target, attempt = self.target, self.attempt_after(facts.attempt)
        return Decision(target, attempt, facts.cancel_requested, None, self.notify)


# Each claim reads one state, along the claim index (ADR 0001): the sweeper
# requeues due retries, and only a worker holding the external route takes a fallback.
CLAIMS: Final[dict[Event, Transition]] = {
    Event.CLAIM: Transition(S.QUEUED, S.RUNNING, starts_attempt=True),
    # A fallback claim continues the attempt the local route could not serve.
    Event.CLAIM_EXTERNAL: Transition(S.WAITING_FOR_EXTERNAL_FALLBACK, S.RUNNING),
}
COMPLETION: Final = Transition(S.RUNNING, S.SUCCEEDED)
REQUEUE: Final = Transition(S.WAITING_FOR_RETRY, S.QUEUED)  # a due retry, by the sweeper
# A new operation; a manual retry starts over from the same values.
CREATED: Final = Decision(S.QUEUED, 0, False, None)


def backoff(attempt: int, retry_delay_seconds: int) -> timedelta:
    """Exponential from the operation's retry delay, bounded by the largest allowed delay.

    The un-jittered schedule: ``retry_wait`` draws the real wait below the
    next step of it (ADR 15).
    """
    exponent = max(attempt - 1, 0)
    ceiling = bounds.RETRY_DELAY_SECONDS_RANGE[1]
    return timedelta(seconds=min(retry_delay_seconds * 2 ** min(exponent, 16), ceiling))


Draw = Callable[[], float]
"""A random source: each call a number in [0, 1), as ``random.random`` gives."""

_random = random.Random()  # seeded from the system; jitter needs spread, not secrecy


def system_draw() -> float:
    return _random.random()


# What ``decide`` draws from when it is given no source; tests may replace it.
RETRY_JITTER: Draw = system_draw


def retry_wait(attempt: int, retry_delay_seconds: int, draw: Draw) -> timedelta:
    """How long the retry after ``attempt`` waits: full jitter above the retry delay.

    Uniform between the operation's retry delay and ``backoff(attempt + 1)``
    (twice the un-jittered step, never more than the largest allowed delay of
    one hour), so failures that happened together spread out instead of
    coming back together; whole milliseconds. Pure: ``draw`` is the random
    source, and a draw outside [0, 1] (or NaN) is held to it, so the bounds
    hold for any source.
    """
    floor = timedelta(seconds=retry_delay_seconds)
    ceiling = max(backoff(attempt + 1, retry_delay_seconds), floor)
    value = draw()
    fraction = value if 0.0 <= value <= 1.0 else (1.0 if value > 1.0 else 0.0)  # NaN: 0
    span_ms = (ceiling - floor) // timedelta(milliseconds=1)
    return floor + timedelta(milliseconds=int(fraction * span_ms))


def lease_expiry(now: datetime, lease_seconds: int) -> datetime:
    bounds.int_range("lease_seconds", lease_seconds, bounds.LEASE_SECONDS_RANGE)
    return now + timedelta(seconds=lease_seconds)


def lease_expired(facts: Facts, now: datetime) -> bool:
    return (
        facts.state is S.RUNNING
        and facts.lease_expires_at is not None
        and facts.lease_expires_at <= now
    )


def deadline_passed(facts: Facts, now: datetime) -> bool:
    return facts.deadline_at is not None and facts.deadline_at <= now


def is_due(facts: Facts, now: datetime) -> bool:
    return facts.state is not S.WAITING_FOR_RETRY or (
        facts.next_attempt_at is None or facts.next_attempt_at <= now
    )


def _unchanged(facts: Facts) -> Decision:
    return Decision(
        facts.state, facts.attempt, facts.cancel_requested, facts.next_attempt_at, changed=False
    )


def _terminal(facts: Facts, state: OperationState, failure_code: str | None = None) -> Decision:
    return Decision(state, facts.attempt, facts.cancel_requested, None, True, failure_code)


def _fail_closed(facts: Facts) -> Decision:
    return _terminal(facts, S.FAILED, DEADLINE_FAILURE_CODE)


def _after_lost_attempt(
    facts: Facts,
    now: datetime,
    failure_code: str | None,
    draw: Draw,
    retry_after: timedelta | None = None,
) -> Decision:
    """A running attempt ended without success: cancel, retry later, or fail for good.

    ``retry_after`` is the failure's hint of when to try again (a model provider's
    Retry-After, ADR 68): the retry waits for the later of it and the operation's own
    jittered wait, so a hint shorter than that changes nothing. A hint that puts the retry
    at or past the deadline makes it pointless (a claim would pass over it, and the sweeper
    fail it closed at the deadline): the operation fails now, with the failure's own code,
    as when no attempt is left. Not ``deadline_exceeded``: the deadline has not passed,
    and that code would hide why the operation could not go on. Without a hint the retry
    waits as it always has, the operation's own wait being its own choice.
    """
    if facts.cancel_requested:
        return _terminal(facts, S.CANCELLED)
    if facts.attempt < facts.max_attempts:
        due = now + retry_wait(facts.attempt, facts.retry_delay_seconds, draw)
        if retry_after is not None:
            due = max(due, now + retry_after)
            if facts.deadline_at is not None and due >= facts.deadline_at:
                return _terminal(facts, S.FAILED, failure_code)
        return Decision(S.WAITING_FOR_RETRY, facts.attempt, False, due, failure_code=failure_code)
    return _terminal(facts, S.FAILED, failure_code)


def _claim(facts: Facts, claim: Transition, now: datetime) -> Decision:
    if facts.state is not claim.source:
        raise InvalidTransition(f"{facts.state} is not claimable by this route")
    if deadline_passed(facts, now):
        # Skipped, not failed: the claim passes over the row; the sweeper fails it closed.
        raise InvalidTransition("the deadline has passed")
    return claim.decision(facts)


def _worker(
    facts: Facts, event: Event, now: datetime, draw: Draw, retry_after: timedelta | None
) -> Decision:
    if facts.state is not S.RUNNING:
        if facts.state in DUPLICATE_RESULTS.get(event, frozenset()):
            return _unchanged(facts)
        raise LeaseLost(f"the lease is gone: the operation is {facts.state}")
    if lease_expired(facts, now):
        raise LeaseLost("the lease has expired")
    if event is Event.HEARTBEAT:
        return _unchanged(facts)
    if event is Event.COMPLETE:
        return COMPLETION.decision(facts)
    if event is Event.FAIL_PERMANENT:
        return _terminal(facts, S.FAILED)
    if event is Event.FAIL_RETRYABLE:
        return _after_lost_attempt(facts, now, None, draw, retry_after)
    if event is Event.RELEASE:
        return _release(facts, now)
    if event is Event.REQUEST_FALLBACK:
        if facts.cancel_requested:
            return _terminal(facts, S.CANCELLED)
        return Decision(S.WAITING_FOR_EXTERNAL_FALLBACK, facts.attempt, False, None)
    # ACKNOWLEDGE_CANCEL
    if not facts.cancel_requested:
        raise InvalidTransition("cancellation was not requested")
    return _terminal(facts, S.CANCELLED)


def _release(facts: Facts, now: datetime) -> Decision:
    """A stopping worker gives the attempt back: queued at once, and the attempt it took
    given back too, so the next claim is the same attempt number (no attempt is spent).

    An owner's cancel or a passed deadline still ends the operation, as a lost attempt
    would: queueing it again would only hand it to a claim that must not run it.
    """
    if facts.cancel_requested:
        return _terminal(facts, S.CANCELLED)
    if deadline_passed(facts, now):
        return _fail_closed(facts)
    return Decision(S.QUEUED, max(facts.attempt - 1, 0), False, None)


def _cancel(facts: Facts) -> Decision:
    if facts.state in PENDING_STATES:
        return replace(_terminal(facts, S.CANCELLED), cancel_requested=True)
    if facts.state is S.RUNNING:
        if facts.cancel_requested:
            return _unchanged(facts)
        return Decision(S.RUNNING, facts.attempt, True, None)
    if facts.state is S.CANCELLED:
        return _unchanged(facts)
    raise InvalidTransition(f"the operation has already {facts.state}", code="already_terminal")


# What an owner may retry: the rest is still under way or done well.
RETRYABLE_STATES: Final = frozenset({S.FAILED, S.CANCELLED})


@dataclass(frozen=True)
class Restart:
    """When an owner's retry of an operation runs, and the deadline it runs under."""

    runs_at: datetime
    deadline_at: datetime | None


def restart(
    *,
    now: datetime,
    not_before: datetime,
    time_budget_seconds: int | None,
    deadline_at: datetime | None,
) -> Restart:
    """What a manual retry keeps of the operation's schedule (SPEC §3, "Scheduled").

    It runs at its ``not_before`` while that lies ahead (a scheduled operation cancelled
    before its time and retried keeps its time), else now, as a create naming a time
    already past does. An operation with a time
    budget (every AI analysis) gets a new deadline that counts from when it runs, as a
    create's does; one with only an absolute deadline keeps it. Admission reserves its
    tokens on the budget of the day it runs (``runs_at``), as it does a create's.
    """
    runs_at = max(now, not_before)
    if time_budget_seconds:
        deadline_at = runs_at + timedelta(seconds=time_budget_seconds)
    return Restart(runs_at, deadline_at)


def _retry(facts: Facts) -> Decision:
    if facts.state not in RETRYABLE_STATES:
        raise InvalidTransition(
            f"only failed or cancelled operations can be retried, not {facts.state}",
            code="not_retryable",
        )
    return replace(CREATED, remove_notification=True)


def _sweep(facts: Facts, now: datetime, draw: Draw) -> Decision:
    if lease_expired(facts, now):
        if deadline_passed(facts, now) and not facts.cancel_requested:
            return _fail_closed(facts)
        return _after_lost_attempt(facts, now, LEASE_FAILURE_CODE, draw)
    if facts.state in PENDING_STATES and deadline_passed(facts, now):
        return _fail_closed(facts)
    if facts.state is REQUEUE.source and is_due(facts, now):
        return REQUEUE.decision(facts)
    raise InvalidTransition("nothing to sweep")


# How soon a reader of a live operation may look again when nothing it knows says later:
# a worker may take a due one at any moment (the page's own pace is 0.5 s).
LOOK_AGAIN_SECONDS: Final = 1


def look_again_after(
    state: OperationState,
    *,
    not_before: datetime | None,
    next_attempt_at: datetime | None,
    deadline_at: datetime | None,
    now: datetime,
) -> int | None:
    """The ``Retry-After`` of an answer that shows an operation: when it may have moved.

    None for an ended one: it never changes again, so there is nothing to look again
    for. A queued one scheduled for later, or one waiting for its next attempt, cannot
    move by itself before that time (nor its deadline, if that comes first): the whole
    seconds until then. Any other live one: ``LOOK_AGAIN_SECONDS``. Only its owner's
    own cancel or retry could move it sooner, and they learn that from its answer.
    """
    if state.is_terminal:
        return None
    waits_for = {S.QUEUED: not_before, S.WAITING_FOR_RETRY: next_attempt_at}.get(state)
    if waits_for is None:
        return LOOK_AGAIN_SECONDS
    if deadline_at is not None:
        waits_for = min(waits_for, deadline_at)
    return max(LOOK_AGAIN_SECONDS, math.ceil((waits_for - now).total_seconds()))


class AttemptOutcome(StrEnum):
    """How one attempt (one lease) ended, as its history records it."""

    SUCCEEDED = "succeeded"
    FAILED_RETRYABLE = "failed_retryable"  # the worker's retryable failure
    FAILED = "failed"  # the worker's permanent failure
    FALLBACK = "fallback"  # the local route handed the operation to the external one
    CANCELLED = "cancelled"  # the worker acknowledged the owner's cancel
    EXPIRED = "expired"  # the sweeper found the lease expired
    DEADLINE = "deadline"  # ... and the deadline passed: failed closed
    RELEASED = "released"  # the worker stopped and handed it back: not a failed attempt


_ATTEMPT_ENDS: Final[dict[Event, AttemptOutcome]] = {
    Event.COMPLETE: AttemptOutcome.SUCCEEDED,
    Event.FAIL_RETRYABLE: AttemptOutcome.FAILED_RETRYABLE,
    Event.FAIL_PERMANENT: AttemptOutcome.FAILED,
    Event.REQUEST_FALLBACK: AttemptOutcome.FALLBACK,
    Event.ACKNOWLEDGE_CANCEL: AttemptOutcome.CANCELLED,
    Event.SWEEP: AttemptOutcome.EXPIRED,
    Event.RELEASE: AttemptOutcome.RELEASED,
}


def attempt_outcome(
    source: OperationState, event: Event, decision: Decision
) -> AttemptOutcome | None:
    """How the running attempt ends when ``decision`` (made on ``event``) is applied to an
    operation in ``source``; None when no attempt ends (it was not running, or still is)."""
    if source is not S.RUNNING or decision.state is S.RUNNING or not decision.changed:
        return None
    outcome = _ATTEMPT_ENDS.get(event)
    if decision.failure_code == DEADLINE_FAILURE_CODE:
        return AttemptOutcome.DEADLINE
    if outcome is AttemptOutcome.RELEASED and decision.state is S.CANCELLED:
        return AttemptOutcome.CANCELLED
    return outcome


def decide(
    facts: Facts,
    event: Event,
    now: datetime,
    draw: Draw | None = None,
    *,
    retry_after: timedelta | None = None,
) -> Decision:
    """The one entry point: what ``event`` does to an operation described by ``facts``.

    ``draw`` is the random source of a retry's jitter (``retry_wait``);
    without one, ``RETRY_JITTER`` as it is at the time of the call. ``retry_after`` is a
    retryable failure's hint of the earliest next attempt (``_after_lost_attempt``); no
    other event reads it.
    """
    source = RETRY_JITTER if draw is None else draw
    claim = CLAIMS.get(event)
    if claim is not None:
        return _claim(facts, claim, now)
    if event in WORKER_EVENTS:
        return _worker(facts, event, now, source, retry_after)
    if event is Event.CANCEL:
        return _cancel(facts)
    if event is Event.RETRY:
        return _retry(facts)
    return _sweep(facts, now, source)
