"""The task registry: the one place that says how each AI task type runs."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from durable_ops.model.errors import InvalidArgument


@dataclass(frozen=True)
class TaskSpec:
    task_type: str
    display_name: str  # used in generic notification text; never user content
    subject_type: str
    priority: int
    time_budget: timedelta  # deadline = admission time + budget (fail closed after it)
    max_attempts: int
    retry_delay_seconds: int
    external_allowed: bool  # on the external-route allowlist


STRATEGY_SNAPSHOT = TaskSpec(
    task_type="strategy.snapshot",
    display_name="Strategy snapshot",
    subject_type="job",
    priority=10,
    time_budget=timedelta(minutes=30),
    max_attempts=3,
    retry_delay_seconds=5,
    external_allowed=False,  # deliberately absent from the external allowlist (seed 000)
)

CV_REVIEW = TaskSpec(
    task_type="cv.review",
    display_name="CV review",
    subject_type="attachment",
    priority=5,
    time_budget=timedelta(minutes=30),
    max_attempts=3,
    retry_delay_seconds=5,
    external_allowed=True,
)

AI_TASKS: dict[str, TaskSpec] = {spec.task_type: spec for spec in (STRATEGY_SNAPSHOT, CV_REVIEW)}


def ai_task(task_type: str) -> TaskSpec:
    try:
        return AI_TASKS[task_type]
    except KeyError:
        raise InvalidArgument("task_type", f"{task_type!r} is not a registered AI task") from None


def display_name(task_type: str) -> str:
    spec = AI_TASKS.get(task_type)
    return spec.display_name if spec else "Operation"
