"""All SQL of the workspace: jobs, attachments, AI settings, AI workspace notes.

Every statement runs in the owner's ``Tx`` and filters (inserting, stamps) by ``SCOPE_OWNER``.
A job or CV is deleted with what was made from it (``delete_job``, ``delete_attachment``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any, TypeVar, cast

from sqlalchemy import Select, Table, bindparam, delete, insert, select, update

from durable_ops.model import answers, bounds
from durable_ops.model.errors import (
    PLAN_REQUIRED,
    InUse,
    InvalidArgument,
    NotFound,
    PermissionDenied,
)
from durable_ops.model.scope import ReadLease
from durable_ops.model.states import OperationState, Plan, Privacy
from durable_ops.model.subjects import CV, JOB, SubjectKind
from durable_ops.model.tasks import TASKS
from durable_ops.storage import capacity, drafts, operations, quota
from durable_ops.storage.operations import new_id
from durable_ops.storage.operations.reads import Reader, active_reading
from durable_ops.storage.pages import Page, newest_first_page
from durable_ops.storage.schema import AiWorkspaceNote, Attachment, Base, Job, Owned, UserAiSettings
from durable_ops.storage.tx import SCOPE_OWNER, Tx

NOTE_BODY_MAX = 16_000
ATTACHMENT_KINDS = frozenset({"cv"})
Row = TypeVar("Row", bound=Base)
JOBS = cast(Table, Job.__table__)
ATTACHMENTS = cast(Table, Attachment.__table__)
SETTINGS = cast(Table, UserAiSettings.__table__)
NOTES = cast(Table, AiWorkspaceNote.__table__)


def _of_owner(table: Table) -> Select[Any]:
    return select(table).where(table.c.owner_user_id == SCOPE_OWNER)


@cache  # one statement object per table: Tx checks a statement's scope once
def _by_id(table: Table) -> Select[Any]:
    return _of_owner(table).where(table.c.id == bindparam("row_id"))


@cache
def _inserting(table: Table) -> Any:
    """An INSERT whose row is the scope owner's; the other columns come as parameters."""
    return insert(table).values(owner_user_id=SCOPE_OWNER)


def _owned(tx: Tx, model: type[Row], row_id: str, what: str) -> Row:
    issuable = len(row_id) <= bounds.ID_MAX  # any other id was never issued
    query = _by_id(cast(Table, model.__table__))
    found = tx.execute(query, {"row_id": row_id}).one_or_none() if issuable else None
    if found is None:
        raise _missing(what)
    return model(**found._mapping)


def _missing(what: str) -> NotFound:
    return NotFound(f"{what} not found", code=f"{what}_not_found")


def _read(
    tx: Tx, model: type[Row], row_id: str, what: str, lease: ReadLease | None, now: datetime
) -> Row:
    """One of the owner's rows, read by the gateway (``lease`` None) or by a worker under
    the live lease of an operation that refers to it, as its subject or its second
    reference (ADR 62). Any other row answers exactly as a missing one: what a worker
    does not hold, it cannot tell from what does not exist."""
    if lease is not None:
        held = operations.held_references(tx, lease.operation_id, lease.token, now)
        if (model.__tablename__, row_id) not in held:
            raise _missing(what)
    return _owned(tx, model, row_id, what)


def _created(tx: Tx, model: type[Row], values: dict[str, Any]) -> Row:
    tx.execute(_inserting(cast(Table, model.__table__)), values)
    return model(**values, owner_user_id=tx.owner_id)


# ---- jobs ------------------------------------------------------------------------------


def create_job(tx: Tx, title: str, company: str, description: str, now: datetime) -> Job:
    texts = {
        "title": bounds.single_line("title", title, bounds.JOB_TITLE_MAX),
        "company": bounds.single_line("company", company, bounds.JOB_COMPANY_MAX, required=False),
        "description": bounds.multi_line("description", description, bounds.JOB_DESCRIPTION_MAX),
    }
    quota.take(tx, jobs=1, stored_bytes=quota.utf8_bytes(*texts.values()))
    return _created(tx, Job, {"id": new_id(), **texts, "created_at": now, "updated_at": now})


def get_job(tx: Tx, job_id: str, *, lease: ReadLease | None, now: datetime) -> Job:
    """A job, for the gateway or the worker holding ``lease`` (``_read``)."""
    return _read(tx, Job, job_id, "job", lease, now)


def list_jobs(tx: Tx, *, size: int, token: str) -> Page[Job]:
    return newest_first_page(
        tx, _of_owner(JOBS), size, token, lambda row: Job(**row), listing="jobs"
    )


# ---- attachments ---------------------------------------------------------------------------


def create_attachment(tx: Tx, kind: str, filename: str, text: str, now: datetime) -> Attachment:
    if kind not in ATTACHMENT_KINDS:
        kinds = " or ".join(f'"{name}"' for name in sorted(ATTACHMENT_KINDS))
        raise InvalidArgument("kind", f"must be {kinds}")
    texts = {
        "filename": bounds.single_line("filename", filename, bounds.ATTACHMENT_FILENAME_MAX),
        "text": bounds.multi_line("text", text, bounds.ATTACHMENT_TEXT_MAX),
    }
    quota.take(tx, attachments=1, stored_bytes=quota.utf8_bytes(*texts.values()))
    return _created(tx, Attachment, {"id": new_id(), "kind": kind, **texts, "created_at": now})


def get_attachment(
    tx: Tx, attachment_id: str, *, lease: ReadLease | None, now: datetime
) -> Attachment:
    """A CV, for the gateway or the worker holding ``lease`` (``_read``)."""
    return _read(tx, Attachment, attachment_id, "attachment", lease, now)


def list_attachments(tx: Tx, *, size: int, token: str) -> Page[Attachment]:
    return newest_first_page(
        tx,
        _of_owner(ATTACHMENTS),
        size,
        token,
        lambda row: Attachment(**row),
        listing="attachments",
    )


# ---- subjects ------------------------------------------------------------------------------


def get_subject(tx: Tx, kind: SubjectKind, subject_id: str) -> Base:
    """One of the owner's rows of ``kind``, found by the table the kind names (NotFound
    otherwise): admission's ownership check of every subject kind, with no reader per kind."""
    return _owned(tx, _owned_rows(kind.table), subject_id, kind.name)


def _owned_rows(table: str) -> type[Base]:
    # Only owner-bearing tables qualify: a kind never names rows the owner scope does not filter.
    for mapper in Base.registry.mappers:
        rows: type[Base] = mapper.class_
        if rows.__tablename__ == table and issubclass(rows, Owned):
            return rows
    raise ValueError(f"{table!r} is not an owner-bearing table")


# ---- AI settings -----------------------------------------------------------------------------


@dataclass(frozen=True)
class AiSettingsView:
    ai_enabled: bool
    privacy: Privacy
    plan: Plan


DEFAULT_AI_SETTINGS = AiSettingsView(ai_enabled=False, privacy=Privacy.LOCAL_ONLY, plan=Plan.FREE)
_SETTINGS = _of_owner(SETTINGS)
# The columns it sets are the parameters' (Core derives SET from them).
_UPDATE_SETTINGS = update(SETTINGS).where(SETTINGS.c.owner_user_id == SCOPE_OWNER)


def ai_settings(tx: Tx) -> AiSettingsView:
    row = tx.execute(_SETTINGS).one_or_none()
    if row is None:
        return DEFAULT_AI_SETTINGS
    return AiSettingsView(row.ai_enabled, Privacy(row.privacy), Plan(row.plan))


def read_ai_settings(tx: Tx, *, lease: ReadLease | None, now: datetime) -> AiSettingsView:
    """The settings, for the gateway or a worker holding the live ``lease`` of one of the
    owner's operations (ADR 62): any operation it runs reads them."""
    if lease is not None:
        operations.held_references(tx, lease.operation_id, lease.token, now)
    return ai_settings(tx)


def update_ai_settings(
    tx: Tx,
    now: datetime,
    *,
    ai_enabled: bool | None = None,
    privacy: str | None = None,
    plan: str | None = None,
) -> AiSettingsView:
    """Change the owner's settings; ``plan`` only from the operator's CLI.

    AI cannot be switched on while the plan (after this change) is Free: the
    switch would promise analyses that admission refuses. A plan taken away
    leaves the switch as it was, so granting Pro again restores it; admission
    re-checks the plan every time.
    """
    current = ai_settings(tx)
    try:
        new_privacy = Privacy(privacy) if privacy is not None else current.privacy
    except ValueError:
        raise InvalidArgument("privacy", "must be local_only or external_allowed") from None
    try:
        new_plan = Plan(plan) if plan is not None else current.plan
    except ValueError:
        raise InvalidArgument("plan", "must be free or pro") from None
    if ai_enabled and not current.ai_enabled and new_plan is not Plan.PRO:
        # What an operator runs to grant Pro: ``opsctl users set-plan`` (``durable_ops.cli``).
        raise PermissionDenied(
            "AI analyses need the Pro plan, and this account is on the Free plan; "
            f"an operator grants Pro with `opsctl users set-plan {tx.owner_id} pro`.",
            code=PLAN_REQUIRED,
        )
    enabled = current.ai_enabled if ai_enabled is None else ai_enabled
    values = {"ai_enabled": enabled, "privacy": new_privacy, "plan": new_plan, "updated_at": now}
    if tx.execute(_UPDATE_SETTINGS, values).rowcount == 0:  # rows matched: the owner has none
        tx.execute(_inserting(SETTINGS), {"id": new_id(), **values})
    return AiSettingsView(enabled, new_privacy, new_plan)


# ---- AI workspace notes: each finished analysis, newest first ---------------------------------

# How many results of one task type a subject keeps. A result is at most NOTE_BODY_MAX
# characters, so a subject holds at most about 320 KB of them. Twenty is more than the page
# ever shows at once (the newest, and the one a past operation's "View result" opens), and
# covers the runs a user compares (one per CV, a re-run after editing one) with room to
# spare; a past operation whose result has gone says so ("result_not_found"), the
# operation's own record stays. Bounded, so a script that re-runs an analysis all day
# costs the database a constant, not a growing, amount per subject.
RESULTS_KEPT = bounds.RESULTS_KEPT_PER_SUBJECT

_SUBJECT = (
    NOTES.c.owner_user_id == SCOPE_OWNER,
    NOTES.c.kind == bindparam("kind"),
    NOTES.c.subject_type == bindparam("subject_type"),
    NOTES.c.subject_id == bindparam("subject_id"),
)
_NEWEST_FIRST = (NOTES.c.created_at.desc(), NOTES.c.id.desc())
_NEWEST_NOTE = select(NOTES).where(*_SUBJECT).order_by(*_NEWEST_FIRST).limit(1)
_NOTE_OF_OPERATION = _of_owner(NOTES).where(NOTES.c.operation_id == bindparam("operation_id"))
_BEYOND_KEPT = select(NOTES.c.id).where(*_SUBJECT).order_by(*_NEWEST_FIRST).offset(RESULTS_KEPT)
_DELETE_NOTES = delete(NOTES).where(
    NOTES.c.owner_user_id == SCOPE_OWNER, NOTES.c.id.in_(bindparam("ids", expanding=True))
)


def get_note(tx: Tx, kind: str, subject_type: str, subject_id: str) -> AiWorkspaceNote:
    """The subject's newest result of ``kind``; NotFound ``note_not_found`` before any."""
    subject = {"kind": kind, "subject_type": subject_type, "subject_id": subject_id}
    row = tx.execute(_NEWEST_NOTE, subject).one_or_none()
    if row is None:
        raise NotFound("no note for this subject yet", code="note_not_found")
    return AiWorkspaceNote(**row._mapping)


def get_operation_note(tx: Tx, operation_id: str) -> AiWorkspaceNote:
    """The result the owner's operation published: NotFound ``result_not_found`` when it
    published none, its result is kept no longer, or the id is not one of the owner's."""
    issuable = 0 < len(operation_id) <= bounds.ID_MAX  # any other id was never issued
    found = _note_of_operation(tx, operation_id) if issuable else None
    if found is None:
        raise NotFound("this operation has no result", code="result_not_found")
    return found


def _note_of_operation(tx: Tx, operation_id: str) -> AiWorkspaceNote | None:
    row = tx.execute(_NOTE_OF_OPERATION, {"operation_id": operation_id}).one_or_none()
    return AiWorkspaceNote(**row._mapping) if row is not None else None


def publish_note(
    tx: Tx,
    *,
    kind: str,
    subject_type: str,
    subject_id: str,
    operation_id: str,
    lease_token: str,
    body_json: str,
    now: datetime,
    provenance: tuple[str, str, str] = ("", "", ""),
) -> tuple[AiWorkspaceNote, bool]:
    """Publish the result of the operation whose attempt holds the lease: a new result of
    (owner, kind, subject), beside the earlier ones, never over them.

    The operation row is locked and its lease checked first
    (``operations.hold_for_publish``): the operation must be the scope
    owner's (another owner's is NOT_FOUND, like a missing one, so a worker
    speaking for one owner never attaches a note to another's operation), and
    a stale attempt or a cancelled operation publishes nothing, and the note
    is of the operation's kind and about its subject. An attempt of
    the same operation that already published returns the note unchanged, so
    a retried attempt never makes a second. The result records the operation's
    second reference and that row's name as they are now, and ``provenance``
    (provider, model, route); the subject's results beyond the newest
    ``RESULTS_KEPT`` are deleted in the same transaction.
    """
    bounds.task_type(kind)
    bounds.subject(subject_type, subject_id)
    bounds.text("body_json", body_json, NOTE_BODY_MAX)
    try:  # the page shows what is kept: a body it cannot show is refused, not stored
        answers.published(body_json)
    except answers.AnswerMismatch as mismatch:
        raise InvalidArgument("body_json", str(mismatch), code="answer_mismatch") from None
    bounds.text("operation_id", operation_id, bounds.ID_MAX)
    bounds.text("lease_token", lease_token, bounds.LEASE_TOKEN_MAX)
    provider, model, route = bounds.provenance(*provenance)
    context_ref = operations.hold_for_publish(
        tx, operation_id, lease_token, now, kind=kind, subject=(subject_type, subject_id)
    )
    published = _note_of_operation(tx, operation_id)
    if published is not None:
        return published, False
    subject = {"kind": kind, "subject_type": subject_type, "subject_id": subject_id}
    values = {
        "id": new_id(),
        **subject,
        "operation_id": operation_id,
        "body": body_json,
        "created_at": now,
        "updated_at": now,
        "context_ref": context_ref,
        "context_name": _context_name(tx, kind, context_ref),
        "provider": provider or None,
        "model": model or None,
        "route": route or None,
    }
    note = _created(tx, AiWorkspaceNote, values)
    _forget_beyond_kept(tx, subject)
    return note, True


def _context_name(tx: Tx, kind: str, context_ref: str | None) -> str | None:
    """The name the second reference has now (a CV's filename): None without one, for a kind
    named by its id only, or once the row is gone."""
    context = TASKS.get(kind).context if kind in TASKS else None
    if context_ref is None or context is None or not context.name_column:
        return None
    try:
        row = get_subject(tx, context, context_ref)
    except NotFound:
        return None
    name = getattr(row, context.name_column, None)
    return str(name)[: bounds.RESULT_CONTEXT_NAME_MAX] if name else None


def _forget_beyond_kept(tx: Tx, subject: dict[str, str]) -> None:
    ids = [row.id for row in tx.execute(_BEYOND_KEPT, subject)]
    if ids:
        tx.execute(_DELETE_NOTES, {"ids": ids})


# ---- deleting a job or a CV ------------------------------------------------------------------

_RESULTS_ABOUT = delete(NOTES).where(
    NOTES.c.owner_user_id == SCOPE_OWNER,
    NOTES.c.subject_type == bindparam("row_type"),
    NOTES.c.subject_id == bindparam("row_id"),
)
# A reference is a fresh uuid4: the context alone names one row, whatever its kind.
_RESULTS_WITH = delete(NOTES).where(
    NOTES.c.owner_user_id == SCOPE_OWNER, NOTES.c.context_ref == bindparam("row_id")
)
_STATE_WORDS = {
    OperationState.QUEUED: "queued",
    OperationState.RUNNING: "running",
    OperationState.WAITING_FOR_RETRY: "waiting to try again",
    OperationState.WAITING_FOR_EXTERNAL_FALLBACK: "waiting for the external model",
}


@cache
def _deleting(table: Table) -> Any:
    return delete(table).where(
        table.c.owner_user_id == SCOPE_OWNER, table.c.id == bindparam("row_id")
    )


@dataclass(frozen=True)
class Deleted:
    """What went with a deleted row, for the log: counts, never content."""

    results: int
    drafts: int
    stored_bytes: int


def delete_job(tx: Tx, job_id: str) -> Deleted:
    """Delete one of the owner's jobs and what was made from it (``_delete``)."""
    return _delete(tx, JOB, job_id, "jobs", ("title", "company", "description"))


def delete_attachment(tx: Tx, attachment_id: str) -> Deleted:
    """Delete one of the owner's CVs and what was made from it (``_delete``)."""
    return _delete(tx, CV, attachment_id, "attachments", ("filename", "text"))


def _delete(
    tx: Tx, kind: SubjectKind, row_id: str, counted: str, texts: tuple[str, ...]
) -> Deleted:
    """Delete the owner's row of ``kind`` and everything made from it, in one transaction.

    Refused (``InUse`` ``analysis_active``, naming the operation) while an operation that
    reads the row, as its subject or as its second reference, has not finished: the
    worker would read a row that is gone. Another owner's row, or one already deleted,
    is NotFound ``<kind>_not_found``, as for a read.

    Goes with it: every result that read it, as its subject or as its second reference
    (a snapshot of a job made with this CV quotes the CV: privacy first, one rule for
    both kinds), and the answer drafts of the operations that read it. Its share of the
    owner's quota is given back (one of the ``counted`` rows, and its ``texts``' bytes).
    Finished operations and their notifications stay: they hold only the opaque id, and a
    past operation's result then answers ``result_not_found``, as one no longer kept does.

    Racing an admission of an analysis of the row, the outcome is one or the other, never
    an operation admitted on a row already gone: the delete first takes the lock
    admission takes before it reads the subject (the ``ai_admission_control`` row,
    ``capacity.lock_control``; SQLite's ``BEGIN IMMEDIATE`` serialises the two as
    well). Whichever locks second reads what the first committed (READ COMMITTED): the
    admission then finds no row (404), or the delete an unfinished operation (409). On
    Galera a row lock holds on its own node only, so the delete also writes that row
    (``capacity.reserve``), as every admission that creates does: of two such
    transactions through two nodes, certification lets one commit and the other is
    retried (``db``), and reads again.
    """
    capacity.lock_control(tx)
    row = get_subject(tx, kind, row_id)
    reader = active_reading(tx, kind.name, row_id)
    if reader is not None:
        raise _in_use(kind, reader)
    reference = {"row_type": kind.name, "row_id": row_id}
    results = tx.write(_RESULTS_ABOUT, reference) + tx.write(_RESULTS_WITH, reference)
    drafts_gone = drafts.forget_reading(tx, kind.name, row_id)
    tx.write(_deleting(cast(Table, type(row).__table__)), {"row_id": row_id})
    stored_bytes = quota.utf8_bytes(*(getattr(row, name) for name in texts))
    quota.give_back(tx, **{counted: 1}, stored_bytes=stored_bytes)
    capacity.reserve(tx)
    return Deleted(results, drafts_gone, stored_bytes)


def _in_use(kind: SubjectKind, reader: Reader) -> InUse:
    what = f"An analysis that uses this {kind.label}"
    if reader.cancel_requested:
        message = f"{what} is being cancelled; delete the {kind.label} once it has stopped."
    else:
        state = _STATE_WORDS[reader.state]
        message = f"{what} is still {state}; cancel it first, then delete the {kind.label}."
    return InUse(message, operation_id=reader.operation_id)
