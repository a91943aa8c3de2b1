"""The one schema: every table of durable-ops as typed SQLAlchemy 2 models.

Column widths come from ``durable_ops.model.bounds`` so a bound and its column
cannot disagree. Times are UTC with microseconds (``UtcDateTime``). Tables
that belong to a user carry ``owner_user_id`` through the ``Owned`` mixin; in
an owner scope ``storage.tx.Tx`` runs a statement on them only if it filters
by that column. No ORM session opens: statements run on ``X.__table__``, and a
row read is handed on as a detached instance of its class.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Date,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, declared_attr, mapped_column
from sqlalchemy.types import CHAR, DateTime, TypeDecorator

from durable_ops.model import bounds, notifications
from durable_ops.model.concurrency_limits import SLOT_ID_MAX

ID_LENGTH = 32  # uuid4 hex: unguessable, fixed width
ATTACHMENT_KIND_MAX = 16

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UtcDateTime(TypeDecorator[datetime]):
    """Naive UTC in the database (both engines store naive), aware UTC in Python.

    MariaDB gets ``DATETIME(6)``: without the variant it silently drops
    microseconds. A ``mariadb+pymysql`` URL has dialect name ``mariadb``, so
    the variant is registered under both names.
    """

    impl = DateTime
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> Any:
        if dialect.name in ("mysql", "mariadb"):
            return dialect.type_descriptor(mysql.DATETIME(fsp=6))
        return dialect.type_descriptor(DateTime())

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetimes are ambiguous; pass an aware UTC datetime")
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC)


class LongText(TypeDecorator[str]):
    """User text beyond MariaDB's row-size budget for VARCHAR: MEDIUMTEXT there."""

    impl = Text
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> Any:
        if dialect.name in ("mysql", "mariadb"):
            return dialect.type_descriptor(mysql.MEDIUMTEXT())
        return dialect.type_descriptor(Text())


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class Owned:
    """Mixin of every owner-bearing table; an owner-scoped ``Tx`` requires the filter on it."""

    @declared_attr
    def owner_user_id(cls) -> Mapped[str]:  # noqa: N805 - declared_attr receives the class
        return mapped_column(String(bounds.OWNER_ID_MAX), nullable=False)


def _id() -> Mapped[str]:
    return mapped_column(CHAR(ID_LENGTH), primary_key=True)


class UserOperation(Owned, Base):
    __tablename__ = "user_operations"

    id: Mapped[str] = _id()
    task_type: Mapped[str] = mapped_column(String(bounds.TASK_TYPE_MAX))
    idempotency_key: Mapped[str] = mapped_column(String(bounds.IDEMPOTENCY_KEY_MAX))
    # SHA-256 of the create request: the same key with another request is a conflict.
    request_hash: Mapped[str] = mapped_column(CHAR(64))
    subject_type: Mapped[str] = mapped_column(String(bounds.SUBJECT_TYPE_MAX))
    subject_id: Mapped[str] = mapped_column(String(bounds.SUBJECT_ID_MAX))
    # An optional second opaque reference (the CV a job snapshot reads); never content.
    context_ref: Mapped[str | None] = mapped_column(String(bounds.SUBJECT_ID_MAX))
    state: Mapped[str] = mapped_column(String(32))
    priority: Mapped[int] = mapped_column(Integer)
    attempt: Mapped[int] = mapped_column(Integer)
    max_attempts: Mapped[int] = mapped_column(Integer)
    retry_delay_seconds: Mapped[int] = mapped_column(Integer)
    # Kept so a manual retry gets a fresh deadline the same distance ahead.
    time_budget_seconds: Mapped[int | None] = mapped_column(Integer)
    privacy: Mapped[str] = mapped_column(String(16))
    progress_percent: Mapped[int] = mapped_column(Integer)
    cancel_requested: Mapped[bool] = mapped_column(Boolean)
    # Only the SHA-256 of the lease token is stored; it outlives the lease so an
    # exact duplicate terminal call from the same lease can be recognised.
    lease_token_hash: Mapped[str | None] = mapped_column(CHAR(64))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    next_attempt_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    deadline_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    # Claimable from (ADR 0046): the create's ``not_before``, else its creation. The claim
    # orders a priority's line by it, so a scheduled operation joins the line when due.
    not_before: Mapped[datetime] = mapped_column(UtcDateTime)
    # A queued operation scheduled for later stays out of the claim's line until this
    # moment, when the sweeper clears it (ADR 0050): the claim never walks over it.
    held_until: Mapped[datetime | None] = mapped_column(UtcDateTime)
    # Its turn within its priority (ADR 0049): a virtual start tag given at create, so the
    # claim serves owners in turn; with fairness off, its due time in µs (first due, first out).
    fair_tag: Mapped[int] = mapped_column(BigInteger)
    # The priority it was created with, once aging raised ``priority`` (ADR 0049); NULL
    # before: aging raises it at most ``fairness.AGING_MAX`` levels above this.
    base_priority: Mapped[int | None] = mapped_column(Integer)
    # What a per-key concurrency limit counts this operation under (ADR 0048): the create's
    # key, NULL for its subject id; and the key slot it holds while running under a limit
    # ("" when its type limits only the total; NULL when it holds none).
    concurrency_key: Mapped[str | None] = mapped_column(String(bounds.SUBJECT_ID_MAX))
    slot_key: Mapped[str | None] = mapped_column(String(SLOT_ID_MAX))
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime)
    started_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    failure_code: Mapped[str | None] = mapped_column(String(bounds.FAILURE_CODE_MAX))
    failure_message: Mapped[str | None] = mapped_column(String(bounds.FAILURE_MESSAGE_MAX))
    provider: Mapped[str | None] = mapped_column(String(bounds.PROVIDER_MAX))
    model: Mapped[str | None] = mapped_column(String(bounds.MODEL_MAX))
    route: Mapped[str | None] = mapped_column(String(bounds.ROUTE_MAX))
    result_ref: Mapped[str | None] = mapped_column(String(bounds.SUBJECT_ID_MAX))
    # The admitting request's W3C traceparent while tracing is on; the worker's spans link to it.
    trace_parent: Mapped[str | None] = mapped_column(String(bounds.TRACE_PARENT_MAX))
    # The sums of its attempts' usage (issue 36, ADR 0038): written by the transition that
    # ends an attempt, beside that attempt's own figures, so a list page reads no attempts.
    # A manual retry keeps them: they count every attempt the operation ever had.
    prompt_tokens: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    completion_tokens: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    model_ms: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    # The UTC day whose token budget admission reserved on (NULL: not admitted by AI
    # admission), and what is left of that reservation until the operation ends (ADR 0041).
    budget_day: Mapped[date | None] = mapped_column(Date)
    reserved_tokens: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))

    __table_args__ = (
        UniqueConstraint("owner_user_id", "task_type", "idempotency_key"),
        # The claim walks this index in its ORDER BY, one task type at a time (ADR 0051):
        # queued and in line (not held for later, ADR 0050), of the type, highest
        # priority, then each owner's turn (ADR 0049), the one due longest first among
        # equal turns. The sweeper finds the held rows now due by its first two columns.
        Index(
            "ix_user_operations_claim",
            "state",
            "held_until",
            "task_type",
            text("priority DESC"),
            "fair_tag",
            "not_before",
        ),
        # The queue across task types, in the claim's order: a create's turn reads the
        # head of its priority here (ADR 0049), aging the levels and their heads.
        Index(
            "ix_user_operations_queue",
            "state",
            "held_until",
            text("priority DESC"),
            "fair_tag",
            "not_before",
        ),
        # A create reads its owner's last turn at its priority here (ADR 0049).
        Index("ix_user_operations_owner_turn", "owner_user_id", "priority", "fair_tag"),
        # Admission counts its owner's active operations here, under its global lock
        # (``capacity``): the owner's history is not read.
        Index(
            "ix_user_operations_owner_state", "owner_user_id", "state", "task_type", "held_until"
        ),
        Index("ix_user_operations_owner_listing", "owner_user_id", "created_at", "id"),
        # The list of one state (the operations page's filter, read every two seconds), or
        # of one task type: a seek and a walk of the page's rows, none of the owner's
        # operations of other states or types (0025).
        Index(
            "ix_user_operations_owner_state_listing", "owner_user_id", "state", "created_at", "id"
        ),
        Index(
            "ix_user_operations_owner_type_listing",
            "owner_user_id",
            "task_type",
            "created_at",
            "id",
        ),
        Index("ix_user_operations_state_deadline", "state", "deadline_at"),
        # An owner's watch reads what changed since its cursor (``WatchOwner``).
        Index("ix_user_operations_owner_updated", "owner_user_id", "updated_at"),
        # The prune reads the oldest finished operations first (ADR 0021).
        Index("ix_user_operations_finished_at", "finished_at"),
        Index(
            "ix_user_operations_owner_subject",
            "owner_user_id",
            "subject_type",
            "subject_id",
        ),
        CheckConstraint(
            "progress_percent BETWEEN {} AND {}".format(*bounds.PROGRESS_RANGE), name="progress"
        ),
        CheckConstraint(
            "max_attempts BETWEEN {} AND {}".format(*bounds.MAX_ATTEMPTS_RANGE), name="max_attempts"
        ),
    )


class OperationAttempt(Owned, Base):
    """One attempt of an operation: one lease, from its claim to the transition that ended it.

    The claim inserts it; the end (completion, failure, fallback, acknowledged
    cancel, release, lease expiry or deadline) writes outcome, end, failure,
    provenance and the usage its settlement reported, each in the transition's
    own transaction. ``id`` is derived from the lease token's hash
    (``operations.attempt_id``), so the end is a primary-key UPDATE. A manual
    retry counts ``attempt`` from 1 again.
    """

    __tablename__ = "operation_attempts"

    id: Mapped[str] = _id()
    operation_id: Mapped[str] = mapped_column(
        CHAR(ID_LENGTH), ForeignKey("user_operations.id", ondelete="CASCADE")
    )
    attempt: Mapped[int] = mapped_column(Integer)
    route: Mapped[str] = mapped_column(String(bounds.ROUTE_MAX))
    started_at: Mapped[datetime] = mapped_column(UtcDateTime)
    # At the claim, and again at an end that read the operation (every end but a
    # completion, which only a live lease can make); heartbeats do not write it.
    lease_expires_at: Mapped[datetime] = mapped_column(UtcDateTime)
    ended_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    outcome: Mapped[str | None] = mapped_column(String(32))  # None while it runs
    failure_code: Mapped[str | None] = mapped_column(String(bounds.FAILURE_CODE_MAX))
    failure_message: Mapped[str | None] = mapped_column(String(bounds.FAILURE_MESSAGE_MAX))
    provider: Mapped[str | None] = mapped_column(String(bounds.PROVIDER_MAX))
    model: Mapped[str | None] = mapped_column(String(bounds.MODEL_MAX))
    # What its model calls used, as the settlement that ended it reported (issue 36); None
    # when nothing was reported: an attempt that never reached the model, or one whose
    # worker died (its lease expired) costs nothing.
    prompt_tokens: Mapped[int | None] = mapped_column(Integer)
    completion_tokens: Mapped[int | None] = mapped_column(Integer)
    model_ms: Mapped[int | None] = mapped_column(Integer)

    __table_args__ = (Index("ix_operation_attempts_operation", "operation_id", "started_at"),)


class OperationTombstone(Owned, Base):
    """What is kept of a pruned operation: enough to refuse its key, no content (ADR 0021).

    ``id`` is the deleted operation's id. A create that repeats
    ``(owner, task type, key)`` finds it and is refused; past the tombstone
    horizon (counted, like the operation's, from ``finished_at``) it goes too.
    """

    __tablename__ = "operation_tombstones"

    id: Mapped[str] = _id()
    task_type: Mapped[str] = mapped_column(String(bounds.TASK_TYPE_MAX))
    idempotency_key: Mapped[str] = mapped_column(String(bounds.IDEMPOTENCY_KEY_MAX))
    request_hash: Mapped[str] = mapped_column(CHAR(64))
    final_state: Mapped[str] = mapped_column(String(32))
    finished_at: Mapped[datetime] = mapped_column(UtcDateTime)
    deleted_at: Mapped[datetime] = mapped_column(UtcDateTime)

    __table_args__ = (
        UniqueConstraint("owner_user_id", "task_type", "idempotency_key"),
        Index("ix_operation_tombstones_finished_at", "finished_at"),
    )


class UserNotification(Owned, Base):
    __tablename__ = "user_notifications"

    id: Mapped[str] = _id()
    # One current notification per operation; history deletion leaves it orphaned.
    operation_id: Mapped[str | None] = mapped_column(
        CHAR(ID_LENGTH),
        ForeignKey("user_operations.id", ondelete="SET NULL"),
        unique=True,
    )
    task_type: Mapped[str] = mapped_column(String(bounds.TASK_TYPE_MAX))
    outcome: Mapped[str] = mapped_column(String(16))
    title: Mapped[str] = mapped_column(String(notifications.TITLE_MAX))
    body: Mapped[str] = mapped_column(String(notifications.BODY_MAX))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    read_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    dismissed_at: Mapped[datetime | None] = mapped_column(UtcDateTime)

    __table_args__ = (
        Index("ix_user_notifications_owner_listing", "owner_user_id", "created_at", "id"),
        # The list: the notifications not dismissed, newest first, none of the dismissed (0025).
        Index(
            "ix_user_notifications_owner_shown", "owner_user_id", "dismissed_at", "created_at", "id"
        ),
        # The unread count and "mark all read": the owner's history is not read. It
        # covers the count: MariaDB takes ``read_at IS NULL`` for every row of the owner
        # and would scan the table rather than look each up.
        Index("ix_user_notifications_owner_unread", "owner_user_id", "read_at", "dismissed_at"),
    )


class Job(Owned, Base):
    __tablename__ = "jobs"

    id: Mapped[str] = _id()
    title: Mapped[str] = mapped_column(String(bounds.JOB_TITLE_MAX))
    company: Mapped[str] = mapped_column(String(bounds.JOB_COMPANY_MAX))
    description: Mapped[str] = mapped_column(LongText)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime)

    __table_args__ = (Index("ix_jobs_owner_listing", "owner_user_id", "created_at", "id"),)


class Attachment(Owned, Base):
    __tablename__ = "attachments"

    id: Mapped[str] = _id()
    kind: Mapped[str] = mapped_column(String(ATTACHMENT_KIND_MAX))
    filename: Mapped[str] = mapped_column(String(bounds.ATTACHMENT_FILENAME_MAX))
    text: Mapped[str] = mapped_column(LongText)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)

    __table_args__ = (Index("ix_attachments_owner_listing", "owner_user_id", "created_at", "id"),)


class OwnerStorage(Owned, Base):
    """What one owner stores, kept beside the rows so a create checks its quota with one
    guarded UPDATE of this row (``storage.quota``) rather than a count of every row."""

    __tablename__ = "owner_storage"

    jobs: Mapped[int] = mapped_column(Integer)
    attachments: Mapped[int] = mapped_column(Integer)
    stored_bytes: Mapped[int] = mapped_column(BigInteger)

    __table_args__ = (PrimaryKeyConstraint("owner_user_id"),)


class UserAiSettings(Owned, Base):
    __tablename__ = "user_ai_settings"

    id: Mapped[str] = _id()
    ai_enabled: Mapped[bool] = mapped_column(Boolean)
    privacy: Mapped[str] = mapped_column(String(16))
    plan: Mapped[str] = mapped_column(String(8))
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime)

    __table_args__ = (UniqueConstraint("owner_user_id"),)


class AiWorkspaceNote(Owned, Base):
    """One finished analysis: the validated answer an operation published (issue 39, point 4:
    results as history). One per operation, several per (owner, kind, subject), newest first;
    the newest ``RESULTS_KEPT_PER_SUBJECT`` are kept. It names what made it, as it was then:
    the second reference (``context_ref``, e.g. the CV, and ``context_name``, its filename)
    and the model (``provider``, ``model``, ``route``), so it reads the same after its
    operation is deleted (``operation_id`` is then NULL)."""

    __tablename__ = "ai_workspace_notes"

    id: Mapped[str] = _id()
    kind: Mapped[str] = mapped_column(String(bounds.TASK_TYPE_MAX))
    subject_type: Mapped[str] = mapped_column(String(bounds.SUBJECT_TYPE_MAX))
    subject_id: Mapped[str] = mapped_column(String(bounds.SUBJECT_ID_MAX))
    # The operation whose attempt published this body: a retried attempt of the
    # same operation finds it and publishes nothing twice.
    operation_id: Mapped[str | None] = mapped_column(
        CHAR(ID_LENGTH), ForeignKey("user_operations.id", ondelete="SET NULL")
    )
    body: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime)
    context_ref: Mapped[str | None] = mapped_column(String(bounds.SUBJECT_ID_MAX))
    context_name: Mapped[str | None] = mapped_column(String(bounds.RESULT_CONTEXT_NAME_MAX))
    provider: Mapped[str | None] = mapped_column(String(bounds.PROVIDER_MAX))
    model: Mapped[str | None] = mapped_column(String(bounds.MODEL_MAX))
    route: Mapped[str | None] = mapped_column(String(bounds.ROUTE_MAX))

    __table_args__ = (
        Index("uq_ai_workspace_notes_operation_id", "operation_id", unique=True),
        Index(
            "ix_ai_workspace_notes_subject_created",
            "owner_user_id",
            "kind",
            "subject_type",
            "subject_id",
            "created_at",
        ),
        # Deleting a CV deletes the results made with it (ADR 60): found here, not by
        # reading every result of the owner.
        Index("ix_ai_workspace_notes_owner_context", "owner_user_id", "context_ref"),
    )


class AnswerDraft(Owned, Base):
    """The answer a running attempt has written so far (issue 39): the owner's content, so
    beside the notes, never in the operation row. One per operation: the attempt holding
    the lease (``lease_token_hash``, its ``attempt`` number for the page) replaces an older
    attempt's draft; the end of the operation deletes it, retention any left behind."""

    __tablename__ = "ai_answer_drafts"

    operation_id: Mapped[str] = mapped_column(
        CHAR(ID_LENGTH), ForeignKey("user_operations.id", ondelete="CASCADE"), primary_key=True
    )
    attempt: Mapped[int] = mapped_column(Integer)
    lease_token_hash: Mapped[str] = mapped_column(CHAR(64))
    body: Mapped[str] = mapped_column(LongText)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime)

    __table_args__ = (Index("ix_ai_answer_drafts_updated_at", "updated_at"),)


class AiAdmissionControl(Base):
    """One row: the live global AI switch, and the lock admission takes.

    Admission locks this row (``SELECT … FOR UPDATE``) before counting active
    AI operations, and writes it (``reservations``) when it reserves, so any
    number of admission replicas, on one server or on several Galera nodes,
    serialise their capacity decision on the database and never exceed the
    limits together.
    """

    __tablename__ = "ai_admission_control"

    id: Mapped[str] = mapped_column(String(16), primary_key=True)
    ai_enabled: Mapped[bool] = mapped_column(Boolean)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime)
    # Bumped by every admission that reserves capacity: on Galera the row lock does not reach
    # other nodes, this write does (certification orders the reservations, ADR 0017).
    reservations: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))


GLOBAL_CONTROL_ID = "global"


class TokenBudgetDay(Owned, Base):
    """One owner's use of its token budget on one UTC day (ADR 0041): ``reserved`` by
    running analyses, ``spent`` by ended attempts. Admission writes it in the reserving
    transaction; the transition writer settles it. The global budget is their sum."""

    __tablename__ = "token_budget_days"

    day: Mapped[date] = mapped_column(Date)
    reserved: Mapped[int] = mapped_column(BigInteger)
    spent: Mapped[int] = mapped_column(BigInteger)

    __table_args__ = (
        PrimaryKeyConstraint("owner_user_id", "day"),
        Index("ix_token_budget_days_day", "day"),
    )


class OwnerTokenBudget(Owned, Base):
    """An operator's daily token budget for one owner, in place of its plan's default
    (``opsctl users set-budget``); no row: the plan's."""

    __tablename__ = "owner_token_budgets"

    daily_tokens: Mapped[int] = mapped_column(BigInteger)
    set_by: Mapped[str] = mapped_column(String(bounds.OWNER_ID_MAX))
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime)

    __table_args__ = (PrimaryKeyConstraint("owner_user_id"),)


class PausedTaskType(Base):
    """A task type an operator paused (``opsctl tasks pause``, ADR 0047): the claim takes
    none of its operations and admission starts none, until ``resume`` deletes the row.
    Who paused it and when, for ``opsctl tasks list``."""

    __tablename__ = "paused_task_types"

    task_type: Mapped[str] = mapped_column(String(bounds.TASK_TYPE_MAX), primary_key=True)
    paused_by: Mapped[str] = mapped_column(String(bounds.OWNER_ID_MAX))
    paused_at: Mapped[datetime] = mapped_column(UtcDateTime)


class ConcurrencySlot(Base):
    """How many operations hold one slot now (ADR 0048): a task type's (``type|``) or one
    owner's key of it (``type|owner/key``). The claim reads the rows it needs locked and
    writes their counts in its own transaction; the transition that ends a run takes its
    operation's slots back. ``capacity`` is the registry's limit as the last claim saw it
    (NULL: none), so a claim's SELECT can leave out operations whose slot is full."""

    __tablename__ = "concurrency_slots"

    id: Mapped[str] = mapped_column(String(SLOT_ID_MAX), primary_key=True)
    running: Mapped[int] = mapped_column(Integer)
    capacity: Mapped[int | None] = mapped_column(Integer)


class OwnerShare(Owned, Base):
    """An operator's share for one owner in the claim's turns (``opsctl users set-share``,
    ADR 0049): weight 2 gets two turns for another's one. No row: weight 1."""

    __tablename__ = "owner_shares"

    weight: Mapped[int] = mapped_column(Integer)
    set_by: Mapped[str] = mapped_column(String(bounds.OWNER_ID_MAX))
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime)

    __table_args__ = (PrimaryKeyConstraint("owner_user_id"),)


class UserSession(Owned, Base):
    """A browser sign-in: the cookie carries a random id, the table only its SHA-256.

    ``id`` is that hash, so resolving a cookie is one primary-key read and a
    copy of the table signs nobody in. Logout and ``opsctl sessions revoke``
    delete rows; the Operations process deletes expired ones.
    """

    __tablename__ = "user_sessions"

    id: Mapped[str] = mapped_column(CHAR(64), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime)

    __table_args__ = (
        Index("ix_user_sessions_owner_user_id", "owner_user_id"),
        # The prune deletes the oldest expired sessions first.
        Index("ix_user_sessions_expires_at", "expires_at"),
    )


class UserTokenFloor(Owned, Base):
    """Per user: a user token issued (``iat``) before ``not_before`` is refused.

    Written by ``opsctl sessions revoke``; keyed by the owner so the check of a
    bearer token is one primary-key read.
    """

    __tablename__ = "user_token_floors"

    owner_user_id: Mapped[str] = mapped_column(String(bounds.OWNER_ID_MAX), primary_key=True)
    not_before: Mapped[datetime] = mapped_column(UtcDateTime)


class OperatorConsoleSession(Base):
    """An operator's sign-in to the console (ADR 0045): a one-time link, then a session.

    ``opsctl console link`` (the operator's own key) stores a ``link``; opening it
    in the gateway deletes the link and stores a ``session``, whose id the console
    cookie carries. Like ``UserSession``, ``id`` is the SHA-256 of the random
    value handed out, so a copy of the table signs nobody in; ``operator`` is the
    name the audit log gives every console action. No owner: an operator is none.
    """

    __tablename__ = "operator_console_sessions"

    id: Mapped[str] = mapped_column(CHAR(64), primary_key=True)
    kind: Mapped[str] = mapped_column(String(8))  # "link" or "session"
    operator: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime)

    # Sign-ins prune the expired ones, oldest first.
    __table_args__ = (Index("ix_operator_console_sessions_expires_at", "expires_at"),)
