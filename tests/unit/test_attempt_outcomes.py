"""How an attempt ends is a pure rule of the lifecycle: one outcome per ending event."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from durable_ops.model import lifecycle
from durable_ops.model.lifecycle import AttemptOutcome, Event, Facts
from durable_ops.model.states import OperationState

S = OperationState
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _running(**changes: Any) -> Facts:
    return replace(
        Facts(S.RUNNING, 1, 3, 2, lease_expires_at=NOW + timedelta(seconds=30)), **changes
    )


@pytest.mark.parametrize(
    ("event", "facts", "outcome"),
    [
        (Event.COMPLETE, _running(), AttemptOutcome.SUCCEEDED),
        (Event.FAIL_RETRYABLE, _running(), AttemptOutcome.FAILED_RETRYABLE),
        (Event.FAIL_RETRYABLE, _running(attempt=3), AttemptOutcome.FAILED_RETRYABLE),
        (Event.FAIL_PERMANENT, _running(), AttemptOutcome.FAILED),
        (Event.REQUEST_FALLBACK, _running(), AttemptOutcome.FALLBACK),
        (Event.ACKNOWLEDGE_CANCEL, _running(cancel_requested=True), AttemptOutcome.CANCELLED),
        (Event.SWEEP, _running(lease_expires_at=NOW), AttemptOutcome.EXPIRED),
        (
            Event.SWEEP,
            _running(lease_expires_at=NOW, deadline_at=NOW),
            AttemptOutcome.DEADLINE,
        ),
    ],
)
def test_each_ending_event_names_its_outcome(
    event: Event, facts: Facts, outcome: AttemptOutcome
) -> None:
    decision = lifecycle.decide(facts, event, NOW, draw=lambda: 0.5)
    assert lifecycle.attempt_outcome(facts.state, event, decision) is outcome


def test_nothing_ends_while_the_operation_runs_on_or_was_not_running() -> None:
    running = _running()
    cancel = lifecycle.decide(running, Event.CANCEL, NOW)
    assert cancel.state is S.RUNNING
    assert lifecycle.attempt_outcome(S.RUNNING, Event.CANCEL, cancel) is None
    heartbeat = lifecycle.decide(running, Event.HEARTBEAT, NOW)
    assert lifecycle.attempt_outcome(S.RUNNING, Event.HEARTBEAT, heartbeat) is None
    queued = Facts(S.QUEUED, 0, 3, 2, deadline_at=NOW)
    swept = lifecycle.decide(queued, Event.SWEEP, NOW)
    assert lifecycle.attempt_outcome(S.QUEUED, Event.SWEEP, swept) is None
