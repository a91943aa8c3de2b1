"""The storage layer's conformance suite: every transition, guard and refusal of the
operation aggregate, as one list of cases that each engine must pass (River's
``riverdrivertest``).

Each case takes a migrated ``Database`` and works only on rows of its own (a
fresh owner and task type), so the suite runs on a fresh database per case
(SQLite, MariaDB: ``tests/integration/test_storage_conformance.py``) and on one
shared database of a Galera cluster (``tests/e2e/test_galera.py``) alike. The
per-engine special cases (SQLite's database lock, Galera's claim spread and
certification) are exercised here through the same calls.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pytest
from sqlalchemy import func, select

from durable_ops.model.errors import (
    CANCEL_REQUESTED,
    KEY_USED_FOR_ANOTHER_REQUEST,
    Conflict,
    DomainError,
    InvalidTransition,
    LeaseLost,
    NotFound,
    UsageCharged,
)
from durable_ops.model.held_leases import HeldLease
from durable_ops.model.lifecycle import DEADLINE_FAILURE_CODE, LEASE_FAILURE_CODE, Event
from durable_ops.model.states import OperationState
from durable_ops.model.usage import Usage
from durable_ops.storage import operations
from durable_ops.storage.db import Database
from durable_ops.storage.operations.rows import ROWS_MAX
from durable_ops.storage.schema import OperationAttempt, UserNotification, UserOperation
from durable_ops.storage.tx import ScopeViolation, Tx
from tests.support.stored import scalar

S = OperationState
NOW = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)
LEASE = 30
T = TypeVar("T")


class Store:
    """One case's corner of a database: its own owner and task type."""

    def __init__(self, db: Database) -> None:
        self.db = db
        tag = uuid.uuid4().hex[:10]
        self.owner = f"owner-{tag}"
        self.task = f"conformance.{tag}"
        self._keys = 0

    def owned(self, work: Callable[[Tx], T], owner: str | None = None) -> T:
        return self.db.run(work, owner_id=owner or self.owner)

    def neutral(self, work: Callable[[Tx], T]) -> T:
        return self.db.run(work, owner_id=None)

    def create(self, at: datetime = NOW, task: str = "", **fields: Any) -> UserOperation:
        self._keys += 1
        fields.setdefault("max_attempts", 2)
        request = operations.CreateRequest(
            task or self.task, f"k{self._keys}", "job", "j", **fields
        )
        row, created = self.owned(lambda tx: operations.create(tx, request, at))
        assert created
        return row

    def claim(
        self, at: datetime = NOW, limit: int = 1, tasks: list[str] | None = None, **how: Any
    ) -> list[operations.Claim]:
        named = tasks or [self.task]
        return self.neutral(lambda tx: operations.claim(tx, named, LEASE, at, limit=limit, **how))

    def claimed(self, at: datetime = NOW) -> operations.Claim:
        (claim,) = self.claim(at)
        return claim

    def fresh(self) -> operations.Claim:
        """A new operation, claimed."""
        self.create()
        return self.claimed()

    def row(self, operation_id: str) -> UserOperation:
        return self.owned(lambda tx: operations.get(tx, operation_id))

    def settle(
        self, claim: operations.Claim, event: Event, at: datetime = NOW, **fields: Any
    ) -> Any:
        item = operations.Settlement(
            self.owner, claim.operation.id, claim.lease_token, event, **fields
        )
        return self.neutral(lambda tx: operations.settle(tx, [item], at))[0]

    def beat(self, claim: operations.Claim, at: datetime = NOW, progress: int | None = None) -> Any:
        lease = HeldLease(claim.operation.id, self.owner, claim.lease_token, LEASE, progress)
        return self.neutral(lambda tx: operations.extend(tx, [lease], at))[0]

    def notifications(self, operation_id: str) -> int:
        of_it = UserNotification.operation_id == operation_id
        return int(scalar(self.db, select(func.count()).where(of_it)) or 0)

    def attempts(self, operation_id: str) -> list[OperationAttempt]:
        return self.owned(lambda tx: operations.attempts(tx, operation_id))


def _refused(answer: object, kind: type[DomainError], code: str | None = None) -> None:
    assert isinstance(answer, kind), answer
    if code is not None:
        assert answer.code == code


# ---- create -----------------------------------------------------------------------------


def create_is_deduplicated_by_the_owners_key(db: Database) -> None:
    store = Store(db)
    request = operations.CreateRequest(store.task, "same", "job", "j")
    first, created = store.owned(lambda tx: operations.create(tx, request, NOW))
    again, created_again = store.owned(lambda tx: operations.create(tx, request, NOW))
    assert (created, created_again, again.id) == (True, False, first.id)
    assert first.state == S.QUEUED
    other = operations.CreateRequest(store.task, "same", "job", "another")
    with pytest.raises(Conflict) as refused:
        store.owned(lambda tx: operations.create(tx, other, NOW))
    assert (refused.value.code, refused.value.message) == (
        "idempotency_conflict",
        KEY_USED_FOR_ANOTHER_REQUEST,
    )
    elsewhere, created_elsewhere = store.owned(
        lambda tx: operations.create(tx, request, NOW), owner=f"{store.owner}-b"
    )
    assert created_elsewhere  # a key is the owner's own
    assert elsewhere.id != first.id


# ---- claim ------------------------------------------------------------------------------


def claim_takes_the_top_priority_then_the_oldest(db: Database) -> None:
    store = Store(db)
    old = store.create(NOW - timedelta(seconds=2))
    new = store.create(NOW - timedelta(seconds=1))
    urgent = store.create(NOW, priority=5)
    taken = [store.claimed().operation.id for _ in range(3)]
    assert taken[0] == urgent.id
    assert sorted(taken[1:]) == sorted([old.id, new.id])  # Galera: one of the oldest few
    assert store.claim() == []


def a_claim_batch_gives_each_its_own_lease(db: Database) -> None:
    store = Store(db)
    created = {store.create().id for _ in range(3)}
    claims = store.claim(limit=5)
    assert {claim.operation.id for claim in claims} == created
    assert len({claim.lease_token for claim in claims}) == 3
    for claim in claims:
        row = store.row(claim.operation.id)
        assert (row.state, row.attempt) == (S.RUNNING, 1)
        assert row.lease_expires_at == NOW + timedelta(seconds=LEASE)
        assert [a.attempt for a in store.attempts(row.id)] == [1]


def a_claim_of_several_types_takes_their_top_priority_and_no_other_type(db: Database) -> None:
    store = Store(db)
    other, unnamed = f"{store.task}-b", f"{store.task}-c"
    low = store.create(NOW - timedelta(seconds=5))
    high = store.create(task=other, priority=5)
    middle = store.create(task=other, priority=3)
    store.create(task=unnamed, priority=9)
    asked = [store.task, other, store.task]  # a type named twice is one type
    due = {(S.QUEUED.value, store.task), (S.QUEUED.value, other), (S.QUEUED.value, unnamed)}
    assert store.neutral(lambda tx: operations.claimable_kinds(tx, NOW, due)) == due
    taken = store.claim(limit=2, tasks=asked)
    assert [claim.operation.id for claim in taken] == [high.id, middle.id]
    assert [claim.operation.id for claim in store.claim(limit=5, tasks=asked)] == [low.id]
    assert store.claim(limit=5, tasks=asked) == []
    left = store.neutral(lambda tx: operations.claimable_kinds(tx, NOW, due))
    assert left == {(S.QUEUED.value, unnamed)}


def a_claim_passes_over_a_passed_deadline_and_only_the_neutral_scope_claims(db: Database) -> None:
    store = Store(db)
    store.create(deadline_at=NOW + timedelta(seconds=10))
    assert store.claim(NOW + timedelta(seconds=11)) == []
    with pytest.raises(ScopeViolation):
        store.owned(lambda tx: operations.claim(tx, [store.task], LEASE, NOW))


def a_deadline_has_passed_at_its_very_instant(db: Database) -> None:
    store = Store(db)
    deadline = NOW + timedelta(seconds=10)
    op = store.create(deadline_at=deadline)
    assert store.claim(deadline) == []
    store.neutral(lambda tx: operations.sweep(tx, deadline))
    row = store.row(op.id)
    assert (row.state, row.failure_code) == (S.FAILED, DEADLINE_FAILURE_CODE)


def a_scheduled_operation_waits_out_of_line_until_a_sweep_at_its_time(db: Database) -> None:
    store = Store(db)
    due = NOW + timedelta(minutes=5)
    later = store.create(not_before=due)
    assert store.claim(due) == []  # due by the claimer's clock, but held out of the line
    store.neutral(lambda tx: operations.sweep(tx, due - timedelta(seconds=1)))
    assert store.claim(due) == []  # a sweep before its time leaves it held
    store.neutral(lambda tx: operations.sweep(tx, due))
    assert store.claim(due - timedelta(seconds=1)) == []  # a claimer whose clock is behind
    assert [claim.operation.id for claim in store.claim(due)] == [later.id]


# ---- leases -----------------------------------------------------------------------------


def a_beat_extends_only_a_live_lease_of_its_owner(db: Database) -> None:
    store = Store(db)
    claim = store.fresh()
    later = NOW + timedelta(seconds=10)
    assert store.beat(claim, later, progress=40) == (later + timedelta(seconds=LEASE), False)
    row = store.row(claim.operation.id)
    assert (row.progress_percent, row.lease_expires_at) == (40, later + timedelta(seconds=LEASE))
    bare = later + timedelta(seconds=1)  # a beat that says no progress keeps the last one said
    assert store.beat(claim, bare) == (bare + timedelta(seconds=LEASE), False)
    assert store.row(claim.operation.id).progress_percent == 40
    forged = operations.Claim(claim.operation, "not-the-token")
    _refused(store.beat(forged, later), LeaseLost)
    other = HeldLease(claim.operation.id, f"{store.owner}-b", claim.lease_token, LEASE)
    _refused(store.neutral(lambda tx: operations.extend(tx, [other], later))[0], NotFound)
    expired = bare + timedelta(seconds=LEASE)
    _refused(store.beat(claim, expired), LeaseLost)


def a_beat_after_a_cancel_says_so_and_still_extends(db: Database) -> None:
    store = Store(db)
    claim = store.fresh()
    cancelled = store.owned(lambda tx: operations.cancel(tx, claim.operation.id, NOW))
    assert (cancelled.state, cancelled.cancel_requested) == (S.RUNNING, True)
    later = NOW + timedelta(seconds=5)
    assert store.beat(claim, later, progress=10) == (later + timedelta(seconds=LEASE), True)
    assert store.row(claim.operation.id).progress_percent == 10


def a_result_is_published_only_under_a_live_uncancelled_lease(db: Database) -> None:
    store = Store(db)
    claim = store.fresh()
    subject = ("job", "j")

    def hold(token: str, at: datetime = NOW) -> None:
        store.owned(
            lambda tx: operations.hold_for_publish(
                tx, claim.operation.id, token, at, kind=store.task, subject=subject
            )
        )

    hold(claim.lease_token)
    with pytest.raises(LeaseLost):
        hold("not-the-token")
    with pytest.raises(LeaseLost):
        hold(claim.lease_token, NOW + timedelta(seconds=LEASE))
    store.owned(lambda tx: operations.cancel(tx, claim.operation.id, NOW))
    with pytest.raises(LeaseLost) as refused:
        hold(claim.lease_token)
    assert refused.value.code == CANCEL_REQUESTED


# ---- settlements ------------------------------------------------------------------------


def a_completion_notifies_once_and_ends_its_attempt(db: Database) -> None:
    store = Store(db)
    claim = store.fresh()
    provenance = operations.Provenance("local", "small", "local")
    assert (
        store.settle(claim, Event.COMPLETE, provenance=provenance, result_ref="r1") == S.SUCCEEDED
    )
    assert store.settle(claim, Event.COMPLETE) == S.SUCCEEDED  # an exact repeat changes nothing
    row = store.row(claim.operation.id)
    assert (row.state, row.progress_percent, row.result_ref, row.model) == (
        S.SUCCEEDED, 100, "r1", "small"
    )  # fmt: skip
    assert (row.lease_expires_at, row.finished_at) == (None, NOW)
    assert store.notifications(row.id) == 1
    (attempt,) = store.attempts(row.id)
    assert (attempt.outcome, attempt.ended_at) == ("succeeded", NOW)


def a_settlement_needs_the_live_lease(db: Database) -> None:
    store = Store(db)
    claim = store.fresh()
    forged = operations.Claim(claim.operation, "not-the-token")
    _refused(store.settle(forged, Event.COMPLETE), LeaseLost)
    _refused(store.settle(claim, Event.COMPLETE, NOW + timedelta(seconds=LEASE)), LeaseLost)
    _refused(store.settle(claim, Event.ACKNOWLEDGE_CANCEL), InvalidTransition)
    item = operations.Settlement(
        f"{store.owner}-b", claim.operation.id, claim.lease_token, Event.COMPLETE
    )
    _refused(store.neutral(lambda tx: operations.settle(tx, [item], NOW))[0], NotFound)
    assert store.row(claim.operation.id).state == S.RUNNING
    assert store.notifications(claim.operation.id) == 0


def failures_retry_within_bounds_then_fail_for_good(db: Database) -> None:
    store = Store(db)
    op = store.create(max_attempts=2)
    claim = store.claimed()
    failed = store.settle(claim, Event.FAIL_RETRYABLE, failure_code="busy")
    assert failed == S.WAITING_FOR_RETRY
    row = store.row(op.id)
    due = row.next_attempt_at
    assert due is not None
    assert due > NOW
    assert store.notifications(op.id) == 0
    assert store.neutral(lambda tx: operations.sweep(tx, due)).promoted >= 1
    queued = store.row(op.id)
    # Queued again is a change the owner sees (their event stream polls ``updated_at``),
    # and the time it waited for is behind it.
    assert (queued.state, queued.next_attempt_at, queued.updated_at) == (S.QUEUED, None, due)
    again = store.claimed(due)
    assert again.operation.attempt == 2
    assert store.settle(again, Event.FAIL_RETRYABLE, due, failure_code="busy") == S.FAILED
    assert (store.row(op.id).failure_code, store.notifications(op.id)) == ("busy", 1)
    assert [a.outcome for a in store.attempts(op.id)] == ["failed_retryable", "failed_retryable"]


def a_permanent_failure_and_a_fallback_settle_as_decided(db: Database) -> None:
    store = Store(db)
    failing, falling_back = store.create(), store.create()
    by_id = {claim.operation.id: claim for claim in store.claim(limit=2)}
    failed = store.settle(by_id[failing.id], Event.FAIL_PERMANENT, failure_code="bad_input")
    assert failed == S.FAILED
    fallback = store.settle(by_id[falling_back.id], Event.REQUEST_FALLBACK)
    assert fallback == S.WAITING_FOR_EXTERNAL_FALLBACK
    assert store.claim() == []  # only the external route takes it now
    (external,) = store.claim(external_route=True)
    assert (external.operation.id, external.operation.attempt) == (falling_back.id, 1)


def a_batch_answers_each_settlement_alone(db: Database) -> None:
    store = Store(db)
    first, second = store.create(), store.create()
    by_id = {claim.operation.id: claim for claim in store.claim(limit=2)}
    items = [
        operations.Settlement(store.owner, first.id, by_id[first.id].lease_token, Event.COMPLETE),
        operations.Settlement(store.owner, second.id, "not-the-token", Event.COMPLETE),
        operations.Settlement(store.owner, first.id, by_id[first.id].lease_token, Event.COMPLETE),
    ]
    answers = store.neutral(lambda tx: operations.settle(tx, items, NOW))
    assert (answers[0], answers[2]) == (S.SUCCEEDED, S.SUCCEEDED)
    _refused(answers[1], LeaseLost)
    assert (store.row(first.id).state, store.row(second.id).state) == (S.SUCCEEDED, S.RUNNING)
    assert store.notifications(first.id) == 1


def an_acknowledged_cancel_ends_cancelled(db: Database) -> None:
    store = Store(db)
    claim = store.fresh()
    store.owned(lambda tx: operations.cancel(tx, claim.operation.id, NOW))
    assert store.settle(claim, Event.ACKNOWLEDGE_CANCEL) == S.CANCELLED
    assert store.notifications(claim.operation.id) == 1
    assert [a.outcome for a in store.attempts(claim.operation.id)] == ["cancelled"]


def a_release_queues_the_operation_again_without_spending_its_attempt(db: Database) -> None:
    store = Store(db)
    op = store.create(max_attempts=1)
    claim = store.claimed()
    assert store.beat(claim, progress=51) is not None
    assert store.settle(claim, Event.RELEASE) == S.QUEUED
    assert store.settle(claim, Event.RELEASE) == S.QUEUED  # an exact repeat changes nothing
    row = store.row(op.id)
    assert (row.state, row.attempt, row.progress_percent) == (S.QUEUED, 0, 51)
    assert (row.lease_expires_at, row.finished_at, row.failure_code) == (None, None, None)
    assert store.notifications(op.id) == 0
    _refused(store.settle(claim, Event.COMPLETE), LeaseLost)  # the lease is handed back
    # Claimable at once, as the same attempt: a budget of one still has its attempt.
    later = NOW + timedelta(seconds=1)
    again = store.claimed(later)
    assert (again.operation.id, again.operation.attempt) == (op.id, 1)
    _refused(store.settle(claim, Event.RELEASE, later), LeaseLost)  # gone for good
    assert store.settle(again, Event.COMPLETE, later) == S.SUCCEEDED
    attempts = store.attempts(op.id)
    assert [(a.attempt, a.outcome) for a in attempts] == [(1, "released"), (1, "succeeded")]


def a_release_of_a_lost_lease_or_under_a_cancel_is_no_requeue(db: Database) -> None:
    store = Store(db)
    expired = store.fresh()
    late = NOW + timedelta(seconds=LEASE)
    _refused(store.settle(expired, Event.RELEASE, late), LeaseLost)
    assert store.row(expired.operation.id).state == S.RUNNING  # left to the sweeper
    cancelled = store.fresh()
    store.owned(lambda tx: operations.cancel(tx, cancelled.operation.id, NOW))
    assert store.settle(cancelled, Event.RELEASE) == S.CANCELLED
    assert store.notifications(cancelled.operation.id) == 1
    assert [a.outcome for a in store.attempts(cancelled.operation.id)] == ["cancelled"]


# ---- the owner's cancel and retry -------------------------------------------------------


def an_owner_cancels_what_is_pending_and_retries_what_ended(db: Database) -> None:
    store = Store(db)
    op = store.create()
    cancelled = store.owned(lambda tx: operations.cancel(tx, op.id, NOW))
    assert (cancelled.state, store.notifications(op.id)) == (S.CANCELLED, 1)
    assert store.owned(lambda tx: operations.cancel(tx, op.id, NOW)).state == S.CANCELLED
    later = NOW + timedelta(seconds=1)
    retried = store.owned(lambda tx: operations.retry(tx, op.id, later))
    assert (retried.state, retried.attempt, store.notifications(op.id)) == (S.QUEUED, 0, 0)
    with pytest.raises(InvalidTransition) as refused:
        store.owned(lambda tx: operations.retry(tx, op.id, later))
    assert refused.value.code == "not_retryable"
    with pytest.raises(NotFound):
        store.owned(lambda tx: operations.cancel(tx, op.id, later), owner=f"{store.owner}-b")
    claim = store.claimed(later)
    assert store.settle(claim, Event.COMPLETE, later) == S.SUCCEEDED
    with pytest.raises(InvalidTransition) as done:
        store.owned(lambda tx: operations.cancel(tx, op.id, later))
    assert done.value.code == "already_terminal"


# ---- the sweeper ------------------------------------------------------------------------


def the_sweeper_expires_leases_and_fails_deadlines_closed(db: Database) -> None:
    store = Store(db)
    running = store.create(max_attempts=2)
    late = store.create(deadline_at=NOW + timedelta(seconds=5))
    claim = store.claimed()
    assert claim.operation.id in (running.id, late.id)
    swept_at = NOW + timedelta(seconds=LEASE)
    store.neutral(lambda tx: operations.sweep(tx, swept_at))
    expired, missed = (
        store.row(claim.operation.id),
        store.row(late.id if claim.operation.id == running.id else running.id),
    )
    if claim.operation.id == late.id:  # its deadline passed with its lease: failed closed
        assert (expired.state, expired.failure_code) == (S.FAILED, DEADLINE_FAILURE_CODE)
    else:
        assert (expired.state, expired.failure_code) == (S.WAITING_FOR_RETRY, LEASE_FAILURE_CODE)
        assert (missed.state, missed.failure_code) == (S.FAILED, DEADLINE_FAILURE_CODE)
    assert [a.outcome for a in store.attempts(claim.operation.id)] in (["expired"], ["deadline"])
    _refused(store.settle(claim, Event.COMPLETE, swept_at), LeaseLost)
    with pytest.raises(ScopeViolation):  # every owner's rows, or none
        store.owned(lambda tx: operations.sweep(tx, swept_at))


def the_usage_of_a_lost_lease_is_charged_once(db: Database) -> None:
    store = Store(db)
    used, other = Usage(300, 40, 800), Usage(1, 1, 1)
    expired_at = NOW + timedelta(seconds=LEASE)
    unswept = store.fresh()  # its settlement comes before the sweeper: ended as it would
    _refused(store.settle(unswept, Event.COMPLETE, expired_at, usage=used), UsageCharged)
    assert store.row(unswept.operation.id).state == S.WAITING_FOR_RETRY
    (attempt,) = store.attempts(unswept.operation.id)
    assert (attempt.outcome, attempt.prompt_tokens, attempt.model_ms) == ("expired", 300, 800)

    swept = store.fresh()
    store.neutral(lambda tx: operations.sweep(tx, expired_at))
    for _ in range(2):  # a repeat is answered as charged, and charges nothing more
        _refused(store.settle(swept, Event.COMPLETE, expired_at, usage=used), UsageCharged)
    refused = store.settle(swept, Event.COMPLETE, expired_at, usage=other)
    assert type(refused) is LeaseLost  # not its settlement's figures
    _refused(store.settle(swept, Event.COMPLETE, expired_at), LeaseLost)  # nothing to charge
    row = store.row(swept.operation.id)
    assert (row.state, row.prompt_tokens, row.completion_tokens, row.model_ms) == (
        S.WAITING_FOR_RETRY,
        300,
        40,
        800,
    )
    assert [a.completion_tokens for a in store.attempts(swept.operation.id)] == [40]


def a_due_retry_past_its_deadline_is_not_queued_again(db: Database) -> None:
    store = Store(db)
    for _ in range(ROWS_MAX + 1):
        store.create(deadline_at=NOW + timedelta(seconds=600))
    batch, last = store.claim(limit=ROWS_MAX), store.claimed()
    fail = Event.FAIL_RETRYABLE
    items = [
        operations.Settlement(store.owner, c.operation.id, c.lease_token, fail, failure_code="busy")
        for c in batch
    ]
    answers = store.neutral(lambda tx: operations.settle(tx, items, NOW))
    answers.append(store.settle(last, fail, failure_code="busy"))
    assert set(answers) == {S.WAITING_FOR_RETRY}
    # More rows past their deadline than one sweep fails closed: those left for the next
    # sweep stay waiting, their due retries not queued for a claim that must pass them over.
    store.neutral(lambda tx: operations.sweep(tx, NOW + timedelta(days=1)))
    ours = UserOperation.task_type == store.task
    assert scalar(db, select(func.count()).where(ours, UserOperation.state == S.QUEUED)) == 0


def a_fallback_still_waiting_at_its_deadline_is_failed_closed(db: Database) -> None:
    store = Store(db)
    deadline = NOW + timedelta(seconds=10)
    op = store.create(deadline_at=deadline)
    assert store.settle(store.claimed(), Event.REQUEST_FALLBACK) == S.WAITING_FOR_EXTERNAL_FALLBACK
    store.neutral(lambda tx: operations.sweep(tx, deadline))
    row = store.row(op.id)
    assert (row.state, row.failure_code, row.finished_at) == (
        S.FAILED, DEADLINE_FAILURE_CODE, deadline
    )  # fmt: skip
    assert store.notifications(op.id) == 1
    assert store.claim(deadline, external_route=True) == []


CASES: list[Callable[[Database], None]] = [
    create_is_deduplicated_by_the_owners_key,
    claim_takes_the_top_priority_then_the_oldest,
    a_claim_batch_gives_each_its_own_lease,
    a_claim_of_several_types_takes_their_top_priority_and_no_other_type,
    a_claim_passes_over_a_passed_deadline_and_only_the_neutral_scope_claims,
    a_deadline_has_passed_at_its_very_instant,
    a_scheduled_operation_waits_out_of_line_until_a_sweep_at_its_time,
    a_beat_extends_only_a_live_lease_of_its_owner,
    a_beat_after_a_cancel_says_so_and_still_extends,
    a_result_is_published_only_under_a_live_uncancelled_lease,
    a_completion_notifies_once_and_ends_its_attempt,
    a_settlement_needs_the_live_lease,
    failures_retry_within_bounds_then_fail_for_good,
    a_permanent_failure_and_a_fallback_settle_as_decided,
    a_batch_answers_each_settlement_alone,
    an_acknowledged_cancel_ends_cancelled,
    a_release_queues_the_operation_again_without_spending_its_attempt,
    a_release_of_a_lost_lease_or_under_a_cancel_is_no_requeue,
    an_owner_cancels_what_is_pending_and_retries_what_ended,
    the_sweeper_expires_leases_and_fails_deadlines_closed,
    the_usage_of_a_lost_lease_is_charged_once,
    a_due_retry_past_its_deadline_is_not_queued_again,
    a_fallback_still_waiting_at_its_deadline_is_failed_closed,
]
