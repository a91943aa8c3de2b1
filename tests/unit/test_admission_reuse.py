"""When a reused analysis runs, as a start's answer says (ADR 0058): the pure rules."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from durable_ops.model import admission
from durable_ops.model.states import OperationState

NOON = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
LATER = NOON + timedelta(hours=3)


def test_a_time_already_past_or_none_means_now() -> None:
    assert admission.due_at(None, NOON) == NOON
    assert admission.due_at(NOON - timedelta(days=1), NOON) == NOON
    assert admission.due_at(LATER, NOON) == LATER


def test_only_a_queued_operation_waits_for_a_later_time() -> None:
    assert admission.waits_until(OperationState.QUEUED, LATER, NOON) == LATER
    assert admission.waits_until(OperationState.QUEUED, NOON, NOON) is None
    # Cancelled before its time: it waits for nothing any more.
    assert admission.waits_until(OperationState.CANCELLED, LATER, NOON) is None
