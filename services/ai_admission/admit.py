"""The admission use case: one transaction that decides and reserves.

Under the admission lock it re-reads the live global switch, the plan and
the user's AI setting, checks the subject is the owner's, returns an
idempotent or still-active operation for the same work, counts capacity and
reserves the analysis's expected tokens on the owner's day (ADR 0041), and
only then writes the reservation on the control row and inserts. The
operation stores the subject's id, never its text.

A returned operation keeps its own time (ADR 0058): the answer says it was
reused and when it is due, so a start naming another ``not_before`` than its
subject's active analysis learns that it runs then (SPEC: an active one is
reused, 202, the same id). An idempotency key sent again with another
``not_before`` is another request: ``idempotency_conflict`` (409), as the
Operations service's fingerprint refuses it.

A COMMIT lost on the way is resolved by the operation's fresh id
(``operations.create`` registers the check), never guessed.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import date, datetime

from durable_ops.model import admission, bounds, budgets, lifecycle
from durable_ops.model.errors import (
    KEY_USED_FOR_ANOTHER_REQUEST,
    Conflict,
    InvalidArgument,
    Unavailable,
)
from durable_ops.model.lifecycle import RETRYABLE_STATES
from durable_ops.model.states import Plan
from durable_ops.model.subjects import SubjectKind
from durable_ops.model.tasks import TASKS, TaskType
from durable_ops.storage import budgets as budget_store
from durable_ops.storage import capacity, operations, task_pauses, workspace
from durable_ops.storage.schema import UserOperation
from durable_ops.storage.tx import Tx

# The stable code of a refusal because an operator paused the task type (HTTP 503).
TASK_PAUSED = "task_paused"


@dataclass(frozen=True)
class AdmitRequest:
    task_type: str
    subject_id: str
    context_ref: str = ""
    idempotency_key: str = ""
    # The admitting request's W3C traceparent (tracing on): a trace id, never content.
    trace_parent: str = ""
    # Run it not before then (ADR 0046); its time budget counts from it.
    not_before: datetime | None = None


def check_subjects(tx: Tx, task: TaskType, request: AdmitRequest) -> int:
    """Both references must be the caller's own rows (another owner's → NOT_FOUND);
    answers the estimated tokens of their texts as the prompt will send them."""
    subject = workspace.get_subject(tx, task.subject, request.subject_id)
    tokens = budgets.input_tokens(task.subject, _texts(task.subject, subject))
    if request.context_ref:
        if task.context is None:
            raise InvalidArgument("context_ref", f"is not taken by {task.name}")
        context = workspace.get_subject(tx, task.context, request.context_ref)
        tokens += budgets.input_tokens(task.context, _texts(task.context, context))
    return tokens


def _texts(kind: SubjectKind, row: object) -> dict[str, str]:
    return {field.name: str(getattr(row, field.name)) for field in kind.fields}


def reserve_tokens(
    tx: Tx,
    *,
    input_tokens: int,
    plan: Plan,
    limits: admission.Limits,
    now: datetime,
    runs_at: datetime,
) -> tuple[date, int]:
    """Take the analysis's expected tokens from the owner's budget of the day it is due
    to run (today, or a scheduled one's day) and check the global room of that day, under
    the admission lock (ADR 0041); the day and the tokens reserved."""
    day = budgets.budget_day(runs_at)
    expected = budgets.expected_tokens(input_tokens)
    everyone = budget_store.everyone_use(tx, day)
    limit = budget_store.owner_limit(tx, plan)
    budget_store.reserve(tx, tokens=expected, limit=limit, day=day, now=now)
    budgets.require_room(
        expected=expected,
        everyone=everyone,
        global_limit=limits.global_daily_tokens,
        now=now,
        day=day,
    )
    return day, expected


def admit(
    tx: Tx,
    request: AdmitRequest,
    limits: admission.Limits,
    now: datetime,
) -> tuple[UserOperation, bool]:
    task = TASKS.get(request.task_type)
    if not request.subject_id:
        raise InvalidArgument("subject_id", "is required")
    if request.idempotency_key:
        bounds.idempotency_key(request.idempotency_key)
    settings = _entitled(tx)
    input_tokens = check_subjects(tx, task, request)
    due = now if request.not_before is None else bounds.not_before(request.not_before, now)
    create = operations.CreateRequest(
        task_type=task.name,
        # Without a key, repeated clicks are still one operation: the active one is reused.
        idempotency_key=request.idempotency_key or f"admission-{uuid.uuid4().hex}",
        subject_type=task.subject.name,
        subject_id=request.subject_id,
        context_ref=request.context_ref,
        priority=task.priority,
        max_attempts=task.max_attempts,
        retry_delay_seconds=task.retry_delay_seconds,
        privacy=settings.privacy,
        not_before=request.not_before,
        deadline_at=due + task.time_budget,
        time_budget_seconds=int(task.time_budget.total_seconds()),
        trace_parent=request.trace_parent,
    )
    if request.idempotency_key:
        existing = operations.find_by_key(tx, task.name, request.idempotency_key)
        if existing is not None:
            # Its time as its first request stored it: a past one meant its creation.
            asked_due = admission.due_at(request.not_before, existing.created_at)
            if (existing.subject_id, existing.context_ref or "", existing.not_before) != (
                request.subject_id,
                request.context_ref,
                asked_due,
            ):
                raise Conflict(KEY_USED_FOR_ANOTHER_REQUEST)
            return existing, True
    active = operations.active_for_subject(tx, task.name, task.subject.name, request.subject_id)
    if active is not None:
        return active, True
    day, tokens = _reserve(tx, task, input_tokens, settings.plan, limits, now, runs_at=due)
    op, _created = operations.create(tx, create, now)
    budget_store.reserved_for(tx, op.id, tokens=tokens, day=day)
    return op, False


def retry(tx: Tx, operation_id: str, limits: admission.Limits, now: datetime) -> UserOperation:
    """The owner's retry of a failed or cancelled operation. An analysis runs again only
    as admitted again: entitled, within capacity, its expected tokens reserved on the
    budget of the day it runs, as a create's are: today, or the day of the time it is
    still scheduled for (``lifecycle.restart``; a retry draws from the same budget as the
    first run). Any other operation, or one in another state (409 from the lifecycle),
    is left to the retry itself."""
    op = operations.get(tx, operation_id)
    if op.task_type not in TASKS or op.state not in RETRYABLE_STATES:
        return operations.retry(tx, operation_id, now)
    task = TASKS.get(op.task_type)
    settings = _entitled(tx)
    again = AdmitRequest(task.name, op.subject_id, op.context_ref or "")
    input_tokens = check_subjects(tx, task, again)
    runs_at = lifecycle.restart(
        now=now,
        not_before=op.not_before,
        time_budget_seconds=op.time_budget_seconds,
        deadline_at=op.deadline_at,
    ).runs_at
    day, tokens = _reserve(tx, task, input_tokens, settings.plan, limits, now, runs_at=runs_at)
    retried = operations.retry(tx, operation_id, now)
    budget_store.reserved_for(tx, retried.id, tokens=tokens, day=day)
    return retried


def _entitled(tx: Tx) -> workspace.AiSettingsView:
    """Take the admission lock, then check the global switch, plan and the user's setting."""
    control = capacity.lock_control(tx)
    settings = workspace.ai_settings(tx)
    admission.require_entitled(
        global_enabled=control.ai_enabled, plan=settings.plan, ai_enabled=settings.ai_enabled
    )
    return settings


def _reserve(
    tx: Tx,
    task: TaskType,
    input_tokens: int,
    plan: Plan,
    limits: admission.Limits,
    now: datetime,
    *,
    runs_at: datetime,
) -> tuple[date, int]:
    """Refuse a paused task type, count capacity, reserve the expected tokens and write
    the control row (under the lock ``_entitled`` took); the day and the tokens reserved."""
    if task_pauses.is_paused(tx, task.name):  # an operator's pause (ADR 0047)
        raise Unavailable(
            f"{task.label} is paused by an operator for now; try again later", code=TASK_PAUSED
        )
    admission.require_capacity(
        owner_active=capacity.active_for_owner(tx, TASKS.names()),
        everyone_active=capacity.active_for_everyone(tx, TASKS.names()),
        limits=limits,
    )
    day, tokens = reserve_tokens(
        tx, input_tokens=input_tokens, plan=plan, limits=limits, now=now, runs_at=runs_at
    )
    capacity.reserve(tx)  # what makes two nodes' admissions conflict (Galera)
    return day, tokens


def lookup(tx: Tx, task_type: str, subject_id: str) -> UserOperation | None:
    task = TASKS.get(task_type)
    return operations.latest_for_subject(tx, task.name, task.subject.name, subject_id)
