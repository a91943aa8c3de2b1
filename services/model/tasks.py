"""The task registry: the one description of every task type. Pure data.

A ``TaskType`` says everything the product needs to know about one kind of
work, and every part reads it from here:

    name, label          "strategy.snapshot", "Strategy snapshot" (notification text, UI)
    subject, context     what the operation is about (a job), and an optional second
                         reference (a CV); each a ``SubjectKind`` (``model.subjects``)
    answer               the JSON schema of the result the worker publishes; its
                         ``title``s are the UI's headings
    answer_tokens        the size most answers reach, in tokens, with and without the
                         context: what a streamed answer's progress is counted
                         against (``model.progress``; the hard cap sent as
                         ``max_tokens`` is ``MAX_ANSWER_TOKENS``)
    priority … external_allowed
                         how admission creates it and which routes may run it
    concurrency          how many may run at once per owner's key and in all (ADR 0048)

Derived spellings live here too, so nothing spells a task a second way: the
URL segment ``strategy-snapshot``, the structured-output schema name
``strategy_snapshot``, the body field of the context reference ``attachment_id``.

Adding a task type: an entry below, its prompt in ``ai_worker/prompts.py``, its
test (docs/tasks.md).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from types import MappingProxyType
from typing import Any

from durable_ops.model import bounds
from durable_ops.model.concurrency_limits import UNLIMITED, Concurrency
from durable_ops.model.errors import InvalidArgument
from durable_ops.model.subjects import CV, JOB, SubjectKind

# The cap sent as ``max_tokens``: above what any schema's own bounds allow (about
# 1,300 tokens), so a wordy model is never cut off, yet a runaway one is stopped.
MAX_ANSWER_TOKENS = 2048


@dataclass(frozen=True)
class AnswerTokens:
    """The size most answers of a task reach, in tokens (streamed chunks): a little under
    the shortest usual answer, so progress ends near the top of the bar (``model.progress``
    climbs to 95 % there, and on more slowly for a longer answer). An answer with the
    task's context (a CV beside the posting) says more than one without: it has
    something to compare."""

    alone: int
    with_context: int | None = None  # None: the same as alone (a task without context)

    def __post_init__(self) -> None:
        if self.alone < 1 or (self.with_context is not None and self.with_context < 1):
            raise ValueError("answer_tokens must be positive")

    def expected(self, *, context_given: bool) -> int:
        if context_given and self.with_context is not None:
            return self.with_context
        return self.alone


@dataclass(frozen=True)
class TaskType:
    name: str
    label: str  # generic, never user content: it is in notification titles
    action: str  # the button that starts one
    subject: SubjectKind
    context: SubjectKind | None
    answer: Mapping[str, Any]
    answer_tokens: AnswerTokens  # the expected answer size: what progress counts against
    priority: int
    time_budget: timedelta  # deadline = admission time + budget (fail closed after it)
    max_attempts: int
    retry_delay_seconds: int
    external_allowed: bool  # on the external-route allowlist
    # How many may run at once, per owner's concurrency key and in all (ADR 0048): what keeps
    # one subject's (or one owner's) burst from holding every worker. Default: no limit.
    concurrency: Concurrency = UNLIMITED

    def __post_init__(self) -> None:
        bounds.task_type(self.name)
        bounds.int_range("priority", self.priority, bounds.PRIORITY_RANGE)
        bounds.int_range("max_attempts", self.max_attempts, bounds.MAX_ATTEMPTS_RANGE)
        bounds.int_range(
            "retry_delay_seconds", self.retry_delay_seconds, bounds.RETRY_DELAY_SECONDS_RANGE
        )

    @property
    def url_segment(self) -> str:
        return self.name.replace(".", "-")

    @property
    def schema_name(self) -> str:
        return self.name.replace(".", "_")

    @property
    def path(self) -> str:
        """The HTTP resource that starts one and reads its cached result."""
        return f"/api/{self.subject.url_segment}/{{id}}/{self.url_segment}"

    def public(self) -> dict[str, Any]:
        """What a web page may know of this task type (rendered into every page)."""
        return {
            "name": self.name,
            "label": self.label,
            "action": self.action,
            "path": self.path,
            "subject": _kind(self.subject),
            "context": _kind(self.context) if self.context else None,
            "answer": self.answer,
        }


def _kind(kind: SubjectKind) -> dict[str, str]:
    return {"name": kind.name, "label": kind.label, "field": kind.reference_field}


@dataclass(frozen=True)
class Registry:
    """The task types the product runs, by name."""

    _tasks: Mapping[str, TaskType] = field(default_factory=dict)

    @classmethod
    def of(cls, *tasks: TaskType) -> Registry:
        by_name = {task.name: task for task in tasks}
        if len(by_name) != len(tasks):
            raise ValueError("task names must be unique")
        return cls(MappingProxyType(by_name))

    def with_task(self, task: TaskType) -> Registry:
        """This registry and one more task type (a test's temporary registry)."""
        return Registry.of(*self, task)

    def __iter__(self) -> Iterator[TaskType]:
        return iter(self._tasks.values())

    def __len__(self) -> int:
        return len(self._tasks)

    def __contains__(self, name: object) -> bool:
        return name in self._tasks

    def get(self, name: str) -> TaskType:
        try:
            return self._tasks[name]
        except KeyError:
            raise InvalidArgument("task_type", f"{name!r} is not a registered task") from None

    def names(self) -> tuple[str, ...]:
        return tuple(self._tasks)

    def label(self, name: str) -> str:
        task = self._tasks.get(name)
        return task.label if task else "Operation"

    def public(self) -> list[dict[str, Any]]:
        return [task.public() for task in self]

    def limits(self) -> Mapping[str, Concurrency]:
        """The concurrency limits of the task types that declare any, by name: what the
        claim counts (a type absent here costs a claim nothing more)."""
        return MappingProxyType(
            {task.name: task.concurrency for task in self if task.concurrency.limited}
        )


# ---- answer schemas: the JSON-schema subset of ``model.answers`` ------------------------


def score(title: str, *, may_be_unscored: bool = False) -> dict[str, Any]:
    """0 to 100; null, where allowed, when there was nothing to compare (never a fake 0)."""
    bounded = {"type": "integer", "minimum": 0, "maximum": 100}
    if may_be_unscored:
        return {"anyOf": [bounded, {"type": "null"}], "title": title}
    return {**bounded, "title": title}


def text(max_length: int) -> dict[str, Any]:
    return {"type": "string", "minLength": 1, "maxLength": max_length}


def items(title: str, max_items: int, max_length: int) -> dict[str, Any]:
    return {"type": "array", "maxItems": max_items, "items": text(max_length), "title": title}


def answer(properties: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "type": "object",
        "additionalProperties": False,
        "required": list(properties),
        "properties": properties,
    }


SUMMARY_MAX = 600
ITEM_MAX = 200

STRATEGY_SNAPSHOT = TaskType(
    name="strategy.snapshot",
    label="Strategy snapshot",
    action="Start strategy snapshot",
    subject=JOB,
    context=CV,
    answer=answer(
        {
            "fit_score": score("Fit", may_be_unscored=True),
            "summary": text(SUMMARY_MAX),
            "strengths": items("Strengths", 6, ITEM_MAX),
            "gaps": items("Gaps", 6, ITEM_MAX),
            "next_steps": items("Next steps", 6, ITEM_MAX),
        }
    ),
    # The development model's answers (tests/integration/test_progress_evenness.py): 212 to
    # 333 chunks with a CV, 186 to 189 without.
    answer_tokens=AnswerTokens(alone=205, with_context=235),
    priority=10,
    time_budget=timedelta(minutes=30),
    max_attempts=3,
    retry_delay_seconds=5,
    external_allowed=False,  # deliberately absent from the external allowlist (seed 000)
)

CV_REVIEW = TaskType(
    name="cv.review",
    label="CV review",
    action="Review CV",
    subject=CV,
    context=JOB,
    answer=answer(
        {
            "overall_score": score("Overall"),
            "summary": text(SUMMARY_MAX),
            "strengths": items("Strengths", 6, ITEM_MAX),
            "improvements": items("Improvements", 6, ITEM_MAX),
            "keywords_missing": items("Missing keywords", 12, 60),
        }
    ),
    # The development model's answers: 149 to 234 chunks with a posting, 129 to 152 without.
    answer_tokens=AnswerTokens(alone=142, with_context=165),
    priority=5,
    time_budget=timedelta(minutes=30),
    max_attempts=3,
    retry_delay_seconds=5,
    external_allowed=True,
)

TASKS = Registry.of(STRATEGY_SNAPSHOT, CV_REVIEW)
