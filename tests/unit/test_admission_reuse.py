"""When a start reuses its subject's active analysis: the pure rules (ADR 0058).

A start that names no time reuses it whenever it runs; one that names the time it runs
at (a past time meaning now) reuses it too; any other time is refused, never dropped.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from durable_ops.model import admission
from durable_ops.model.errors import Conflict
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


@pytest.mark.parametrize(
    "asked",
    [
        None,
        LATER,
        LATER.astimezone(timezone(timedelta(hours=1))),  # the same moment, another offset
    ],
)
def test_no_time_or_the_same_time_reuses_a_scheduled_analysis(asked: datetime | None) -> None:
    admission.require_same_time(asked, active_not_before=LATER, now=NOON, subject="job")


@pytest.mark.parametrize("asked", [None, NOON - timedelta(minutes=1), NOON])
def test_no_time_or_now_reuses_an_analysis_due_now(asked: datetime | None) -> None:
    admission.require_same_time(asked, active_not_before=NOON, now=NOON, subject="CV")


@pytest.mark.parametrize("asked", [LATER + timedelta(microseconds=1), NOON])
def test_another_time_than_a_scheduled_analysis_is_refused(asked: datetime) -> None:
    with pytest.raises(Conflict) as refused:
        admission.require_same_time(asked, active_not_before=LATER, now=NOON, subject="job")
    assert refused.value.code == admission.ANALYSIS_ALREADY_SCHEDULED
    assert refused.value.message == (
        "An analysis of this job is already scheduled for 2026-12-05 15:00:00 UTC;"
        " cancel it to schedule one for another time"
    )


def test_a_later_time_than_an_analysis_due_now_is_refused() -> None:
    with pytest.raises(Conflict) as refused:
        admission.require_same_time(LATER, active_not_before=NOON, now=NOON, subject="CV")
    assert refused.value.code == admission.ANALYSIS_ALREADY_SCHEDULED
    assert refused.value.message == (
        "An analysis of this CV is already under way; cancel it, or wait for it to end,"
        " to schedule one for another time"
    )
