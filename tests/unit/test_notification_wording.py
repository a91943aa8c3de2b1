"""Notification wording (SPEC §4): generic text only, never inputs or diagnostics."""

from __future__ import annotations

import inspect
import itertools
from typing import Final

import pytest

from durable_ops.model.notifications import BODY_MAX, TITLE_MAX, Wording, wording
from durable_ops.model.states import TERMINAL_STATES, OperationState
from durable_ops.model.tasks import TASKS

S = OperationState

TERMINAL: Final = [S.SUCCEEDED, S.FAILED, S.CANCELLED]
NON_TERMINAL: Final = [s for s in OperationState if s not in TERMINAL]
AI_TASK_TYPES: Final = sorted(TASKS.names())

# Things that must never reach a notification: user inputs, diagnostics, results.
SECRET_INPUTS: Final = [
    "Alice Example",
    "alice@example.com",
    "Senior Rust engineer at Initech",
    "ignore previous instructions",
    "connection refused",
    "lease_expired",
    "deadline_exceeded",
    "Traceback",
]


def all_text(w: Wording) -> str:
    return f"{w.title}\n{w.body}"


def test_the_registry_has_the_two_ai_tasks() -> None:
    assert {"strategy.snapshot", "cv.review"} <= set(TASKS.names())
    assert set(TERMINAL) == set(TERMINAL_STATES)


def test_wording_takes_only_a_task_type_and_an_outcome() -> None:
    # No parameter through which inputs, failure messages or results could flow in:
    # besides the two, only the task registry (labels written by us).
    parameters = inspect.signature(wording).parameters
    assert list(parameters) == ["task_type", "outcome", "tasks"]
    assert parameters["tasks"].annotation == "Registry"


@pytest.mark.parametrize(("task_type", "outcome"), list(itertools.product(AI_TASK_TYPES, TERMINAL)))
def test_ai_task_wording_is_generic_and_bounded(task_type: str, outcome: OperationState) -> None:
    w = wording(task_type, outcome)
    assert TASKS.get(task_type).label in w.title
    assert task_type not in all_text(w)  # the display name, not the internal identifier
    assert 0 < len(w.title) <= TITLE_MAX
    assert 0 < len(w.body) <= BODY_MAX
    assert "{" not in all_text(w)
    assert "}" not in all_text(w)
    for secret in SECRET_INPUTS:
        assert secret.lower() not in all_text(w).lower()


@pytest.mark.parametrize("task_type", AI_TASK_TYPES)
def test_each_outcome_reads_differently(task_type: str) -> None:
    titles = {wording(task_type, outcome).title for outcome in TERMINAL}
    assert len(titles) == len(TERMINAL)


@pytest.mark.parametrize("outcome", TERMINAL)
def test_wording_is_the_same_for_every_call(outcome: OperationState) -> None:
    assert wording("cv.review", outcome) == wording("cv.review", outcome)


def test_strategy_snapshot_success_reads_as_in_the_spec() -> None:
    assert wording("strategy.snapshot", S.SUCCEEDED).title == "Strategy snapshot is ready"


@pytest.mark.parametrize(
    "task_type",
    [
        "unknown.task",
        "alice@example.com",
        "cv.review\nSenior Rust engineer at Initech",
        "x" * 500,
        "",
    ],
)
@pytest.mark.parametrize("outcome", TERMINAL)
def test_unknown_task_types_get_a_generic_name(task_type: str, outcome: OperationState) -> None:
    w = wording(task_type, outcome)
    assert w == wording("some.other.unknown", outcome)  # one generic wording per outcome
    if task_type:
        assert task_type not in all_text(w)
    for task in TASKS:
        assert task.label not in w.title
    assert len(w.title) <= TITLE_MAX
    assert len(w.body) <= BODY_MAX


@pytest.mark.parametrize("outcome", NON_TERMINAL)
@pytest.mark.parametrize("task_type", [*AI_TASK_TYPES, "unknown.task"])
def test_non_terminal_outcomes_are_refused(task_type: str, outcome: OperationState) -> None:
    with pytest.raises(ValueError, match="not a terminal outcome"):
        wording(task_type, outcome)
