"""Notification wording: generic per task type and outcome, never user content.

The text names only the kind of work (from the task registry) and how it
ended. It never includes inputs, diagnostics, failure messages or results.
"""

from __future__ import annotations

from dataclasses import dataclass

from durable_ops.model.states import OperationState
from durable_ops.model.tasks import TASKS, Registry

TITLE_MAX = 120
BODY_MAX = 240


@dataclass(frozen=True)
class Wording:
    title: str
    body: str


_OUTCOMES: dict[OperationState, tuple[str, str]] = {
    OperationState.SUCCEEDED: ("{name} is ready", "Open your operations to see it."),
    OperationState.FAILED: (
        "{name} could not be completed",
        "You can retry it from your operations page.",
    ),
    OperationState.CANCELLED: (
        "{name} was cancelled",
        "You can retry it from your operations page.",
    ),
}


def wording(task_type: str, outcome: OperationState, tasks: Registry = TASKS) -> Wording:
    try:
        title, body = _OUTCOMES[outcome]
    except KeyError:
        raise ValueError(f"{outcome} is not a terminal outcome") from None
    return Wording(title.format(name=tasks.label(task_type)), body)
