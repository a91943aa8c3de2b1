"""All SQL of the workspace: jobs, attachments, AI settings, AI workspace notes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from sqlalchemy import select
from sqlalchemy.orm import Session

from durable_ops.model import bounds
from durable_ops.model.bounds import (
    ATTACHMENT_FILENAME_MAX,
    ATTACHMENT_TEXT_MAX,
    JOB_COMPANY_MAX,
    JOB_DESCRIPTION_MAX,
    JOB_TITLE_MAX,
)
from durable_ops.model.errors import PLAN_REQUIRED, InvalidArgument, NotFound, PermissionDenied
from durable_ops.model.states import Plan, Privacy
from durable_ops.model.subjects import SubjectKind
from durable_ops.storage import operations
from durable_ops.storage.operations import new_id
from durable_ops.storage.pages import Page, newest_first, page_size, paginate
from durable_ops.storage.schema import (
    AiWorkspaceNote,
    Attachment,
    Base,
    Job,
    Owned,
    UserAiSettings,
)
from durable_ops.storage.tx import Tx

NOTE_BODY_MAX = 16_000
ATTACHMENT_KINDS = frozenset({"cv"})
Row = TypeVar("Row", bound=Base)


def _owned(session: Session, model: type[Row], row_id: str, what: str) -> Row:
    row = session.get(model, row_id) if len(row_id) <= bounds.ID_MAX else None
    if row is None:
        raise NotFound(f"{what} not found", code=f"{what}_not_found")
    return row


# ---- jobs ------------------------------------------------------------------------------


def create_job(session: Session, title: str, company: str, description: str, now: datetime) -> Job:
    job = Job(
        id=new_id(),
        title=bounds.single_line("title", title, JOB_TITLE_MAX),
        company=bounds.single_line("company", company, JOB_COMPANY_MAX, required=False),
        description=bounds.multi_line("description", description, JOB_DESCRIPTION_MAX),
        created_at=now,
        updated_at=now,
    )
    session.add(job)
    session.flush()
    return job


def get_job(session: Session, job_id: str) -> Job:
    return _owned(session, Job, job_id, "job")


def list_jobs(session: Session, *, size: int, token: str) -> Page[Job]:
    size = page_size(size)
    rows = session.scalars(newest_first(select(Job), Job.created_at, Job.id, token, size)).all()
    return paginate(rows, size, lambda job: (job.created_at, job.id))


# ---- attachments ---------------------------------------------------------------------------


def create_attachment(
    session: Session, kind: str, filename: str, text: str, now: datetime
) -> Attachment:
    if kind not in ATTACHMENT_KINDS:
        kinds = " or ".join(f'"{name}"' for name in sorted(ATTACHMENT_KINDS))
        raise InvalidArgument("kind", f"must be {kinds}")
    attachment = Attachment(
        id=new_id(),
        kind=kind,
        filename=bounds.single_line("filename", filename, ATTACHMENT_FILENAME_MAX),
        text=bounds.multi_line("text", text, ATTACHMENT_TEXT_MAX),
        created_at=now,
    )
    session.add(attachment)
    session.flush()
    return attachment


def get_attachment(session: Session, attachment_id: str) -> Attachment:
    return _owned(session, Attachment, attachment_id, "attachment")


def list_attachments(session: Session, *, size: int, token: str) -> Page[Attachment]:
    size = page_size(size)
    query = newest_first(select(Attachment), Attachment.created_at, Attachment.id, token, size)
    rows = session.scalars(query).all()
    return paginate(rows, size, lambda row: (row.created_at, row.id))


# ---- subjects ------------------------------------------------------------------------------


def get_subject(session: Session, kind: SubjectKind, subject_id: str) -> Base:
    """One of the owner's rows of ``kind``, found by the table the kind names (NotFound
    otherwise): admission's ownership check of every subject kind, with no reader per kind."""
    return _owned(session, _owned_rows(kind.table), subject_id, kind.name)


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
# What an operator runs to grant Pro (``opsctl users set-plan USER pro`` in ``durable_ops.cli``).
GRANT_PRO_COMMAND = "opsctl users set-plan {owner} pro"


def plan_required(owner: str) -> PermissionDenied:
    command = GRANT_PRO_COMMAND.format(owner=owner or "USER")
    return PermissionDenied(
        "AI analyses need the Pro plan, and this account is on the Free plan; "
        f"an operator grants Pro with `{command}`.",
        code=PLAN_REQUIRED,
    )


def _settings_row(session: Session) -> UserAiSettings | None:
    row: UserAiSettings | None = session.scalars(select(UserAiSettings)).one_or_none()
    return row


def ai_settings(session: Session) -> AiSettingsView:
    row = _settings_row(session)
    if row is None:
        return DEFAULT_AI_SETTINGS
    return AiSettingsView(row.ai_enabled, Privacy(row.privacy), Plan(row.plan))


def update_ai_settings(
    session: Session,
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
    current = ai_settings(session)
    try:
        new_privacy = Privacy(privacy) if privacy is not None else current.privacy
    except ValueError:
        raise InvalidArgument("privacy", "must be local_only or external_allowed") from None
    try:
        new_plan = Plan(plan) if plan is not None else current.plan
    except ValueError:
        raise InvalidArgument("plan", "must be free or pro") from None
    if ai_enabled and not current.ai_enabled and new_plan is not Plan.PRO:
        raise plan_required(Tx.of(session).owner_id or "")
    row = _settings_row(session)
    if row is None:
        row = UserAiSettings(id=new_id())
        session.add(row)
    row.ai_enabled = current.ai_enabled if ai_enabled is None else ai_enabled
    row.privacy = new_privacy
    row.plan = new_plan
    row.updated_at = now
    session.flush()
    return AiSettingsView(row.ai_enabled, new_privacy, new_plan)


# ---- AI workspace notes ----------------------------------------------------------------------


def get_note(session: Session, kind: str, subject_type: str, subject_id: str) -> AiWorkspaceNote:
    note: AiWorkspaceNote | None = session.scalars(
        select(AiWorkspaceNote).where(
            AiWorkspaceNote.kind == kind,
            AiWorkspaceNote.subject_type == subject_type,
            AiWorkspaceNote.subject_id == subject_id,
        )
    ).one_or_none()
    if note is None:
        raise NotFound("no note for this subject yet", code="note_not_found")
    return note


def publish_note(
    session: Session,
    *,
    kind: str,
    subject_type: str,
    subject_id: str,
    operation_id: str,
    lease_token: str,
    body_json: str,
    now: datetime,
) -> tuple[AiWorkspaceNote, bool]:
    """Publish the one note of (owner, kind, subject) for the attempt holding the lease.

    The operation row is locked and its lease checked first
    (``operations.hold_for_publish``): the operation must be the scope
    owner's (another owner's is NOT_FOUND, like a missing one, so a worker
    speaking for one owner never attaches a note to another's operation), and
    a stale attempt or a cancelled operation publishes nothing, and the note
    is of the operation's kind and about its subject. An attempt of
    the same operation that already published returns the note unchanged, so
    a retried attempt never makes a second.
    """
    bounds.task_type(kind)
    bounds.subject(subject_type, subject_id)
    bounds.text("body_json", body_json, NOTE_BODY_MAX)
    bounds.text("operation_id", operation_id, bounds.ID_MAX)
    bounds.text("lease_token", lease_token, bounds.LEASE_TOKEN_MAX)
    operations.hold_for_publish(
        Tx.of(session),
        operation_id,
        lease_token,
        now,
        kind=kind,
        subject=(subject_type, subject_id),
    )
    try:
        note = get_note(session, kind, subject_type, subject_id)
    except NotFound:
        note = AiWorkspaceNote(
            id=new_id(),
            kind=kind,
            subject_type=subject_type,
            subject_id=subject_id,
            operation_id=operation_id,
            body=body_json,
            created_at=now,
            updated_at=now,
        )
        session.add(note)
        session.flush()
        return note, True
    if note.operation_id == operation_id:
        return note, False
    note.operation_id = operation_id
    note.body = body_json
    note.updated_at = now
    session.flush()
    return note, True
