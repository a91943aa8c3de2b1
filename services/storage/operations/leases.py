"""A lease holder's beats, the lock a result's publication takes on its lease, and the
check of a worker's read under its lease (``held_references``, ADR 62).

One writer for every beat, a single ``Heartbeat`` (a batch of one) and a
lease stream's beat of up to ``ROWS_MAX`` leases alike: one guarded UPDATE,
each row by its own id, owner and token hash (a token extends only the
operation it was claimed for, of the owner it was claimed for), under a live
lease and, in the common beat, no cancel pending; each row given its own
expiry and, when the beat carries one, its own progress. When fewer rows
matched, one locked read says for each lease why (``decide``), and the same
UPDATE without the cancel guard extends the leases still held whose owner
asked to cancel: their holder learns it in the answer. The answer text a held
lease's beat carries becomes its attempt's draft (``storage.drafts``) in the
same transaction, so only a holder of the live lease ever writes one.
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import Row, Select, Update, bindparam, func, select, update

from durable_ops.model import bounds, lifecycle
from durable_ops.model.errors import (
    CANCEL_REQUESTED,
    DomainError,
    InvalidArgument,
    LeaseLost,
    refusal_raised,
)
from durable_ops.model.held_leases import HeldLease
from durable_ops.model.lifecycle import Event
from durable_ops.model.tasks import TASKS
from durable_ops.storage import drafts
from durable_ops.storage.events import Changed, publish
from durable_ops.storage.operations.rows import (
    LOCKED,
    OPS,
    OWNED,
    S,
    batches,
    by_id,
    facts,
    hash_token,
    held_row,
    lease_live,
    neutral,
    numbered,
    recognise,
)
from durable_ops.storage.per_row import per_row, row_ids
from durable_ops.storage.tx import Tx

Held = tuple[datetime, bool]  # a held lease's new expiry, and whether its owner asked to cancel


@cache
def _extend(count: int, *, unless_cancelled: bool) -> Update:
    ids = row_ids("id", count)

    def own(name: str, type_: Any = None) -> Any:
        return per_row(OPS.c.id, ids, name, type_)

    statement = (
        update(OPS)
        .where(
            OPS.c.id.in_(ids),
            lease_live(),
            OPS.c.lease_token_hash == own("token_hash"),
            OPS.c.owner_user_id == own("owner"),
        )
        .values(
            lease_expires_at=own("expires", OPS.c.lease_expires_at.type),
            progress_percent=func.coalesce(
                own("progress", OPS.c.progress_percent.type), OPS.c.progress_percent
            ),
            updated_at=bindparam("now"),
        )
    )
    return statement.where(OPS.c.cancel_requested.is_(False)) if unless_cancelled else statement


def extend(tx: Tx, leases: Sequence[HeldLease], now: datetime) -> list[Held | DomainError]:
    """Extend many live leases of many owners (the neutral scope), or of the scope's
    owner; answer each one alone, in order."""
    tx = neutral(tx, [lease.owner_id for lease in leases])
    return [answer for part in batches(leases) for answer in _beat(tx, part, now)]


def heartbeat(tx: Tx, lease: HeldLease, now: datetime) -> Held:
    """One beat, its refusal raised."""
    return refusal_raised(extend(tx, [lease], now)[0])


def _own(lease: HeldLease, now: datetime) -> dict[str, Any]:
    """The lease's own values in the beat's UPDATE (``_extend``)."""
    if lease.progress is not None:
        bounds.int_range("progress_percent", lease.progress, bounds.PROGRESS_RANGE)
    return {
        "id": lease.operation_id,
        "owner": lease.owner_id,
        "token_hash": hash_token(lease.token),
        "expires": lifecycle.lease_expiry(now, lease.lease_seconds),
        "progress": lease.progress,
    }


def _beat(tx: Tx, leases: Sequence[HeldLease], now: datetime) -> list[Held | DomainError]:
    beats = [_own(lease, now) for lease in leases]
    extended = tx.write(_extend(len(beats), unless_cancelled=True), numbered(beats, now=now))
    answers: list[Held | DomainError] = [(beat["expires"], False) for beat in beats]
    if extended != len(beats):
        answers = _why(tx, beats, now)
    held = [n for n, answer in enumerate(answers) if not isinstance(answer, DomainError)]
    texts = [
        drafts.Text(lease.operation_id, lease.owner_id, beats[n]["token_hash"], text)
        for n in held
        if (text := (lease := leases[n]).answer_text) is not None
    ]
    drafts.write(tx, texts, now)  # the lease held: its text is this attempt's
    for n in held:
        lease = leases[n]
        if lease.progress is not None or lease.answer_text is not None:
            # what a wait for the operation to move, and its owner's watch, see
            publish(Changed(lease.operation_id, S.RUNNING, owner_id=lease.owner_id))
    if held:
        first = beats[held[0]]
        recognise(
            first["id"], lease_token_hash=first["token_hash"], lease_expires_at=first["expires"]
        )
    return answers


def _why(tx: Tx, beats: list[dict[str, Any]], now: datetime) -> list[Held | DomainError]:
    """The rare beat: a cancel is pending, or some leases are not this holder's any more."""
    rows = {row.id: row._mapping for row in tx.execute(LOCKED, {"ids": [b["id"] for b in beats]})}
    answers: list[Held | DomainError] = []
    cancelled: list[dict[str, Any]] = []
    for beat in beats:
        try:
            row = held_row(rows.get(beat["id"]), beat["owner"], beat["token_hash"])
            lifecycle.decide(facts(row), Event.HEARTBEAT, now)  # LeaseLost when it is gone
        except DomainError as refused:
            answers.append(refused)
            continue
        if row["cancel_requested"]:  # held, so left alone by the guarded beat above
            cancelled.append(beat)
        answers.append((beat["expires"], bool(row["cancel_requested"])))
    if cancelled:
        statement = _extend(len(cancelled), unless_cancelled=False)
        if tx.write(statement, numbered(cancelled, now=now)) != len(cancelled):
            raise RuntimeError("a lease read held and locked was not extended")  # unreachable
    return answers


# The operation row with whether its lease is live at ``:now``, in the owner scope.
_LEASE = select(OPS, lease_live().label("lease_live")).where(
    OPS.c.id == bindparam("operation_id"), OWNED
)
_LOCK_LEASE = _LEASE.with_for_update()


def _held(tx: Tx, statement: Select[Any], operation_id: str, token: str, now: datetime) -> Row[Any]:
    """The operation's row while ``token`` holds its live lease. The operation must be
    the scope owner's: another owner's answers exactly like a missing one (NOT_FOUND
    ``operation_not_found``), before any lease is looked at; any other lease, or one
    that ended or ran out, is ``LeaseLost``."""
    row = by_id(tx, statement, operation_id, now=now)
    held = row.lease_token_hash
    if not (row.lease_live and held and hmac.compare_digest(held, hash_token(token))):
        raise LeaseLost("the lease is not live: the operation ended or another attempt holds it")
    return row


def hold_for_publish(
    tx: Tx, operation_id: str, token: str, now: datetime, *, kind: str, subject: tuple[str, str]
) -> str | None:
    """Lock the operation row; pass only while ``token`` holds its live lease and no cancel waits.
    Answers the operation's second reference (``context_ref``), which its result records.

    Runs in the transaction that writes the attempt's result, so a cancel or
    a takeover commits either before (and the result is refused) or after
    (and finds the result published). Cancel wins until then. The operation
    must be the scope owner's (``_held``).
    """
    row = _held(tx, _LOCK_LEASE, operation_id, token, now)
    if row.cancel_requested:
        raise LeaseLost("the owner cancelled the operation", code=CANCEL_REQUESTED)
    # The result is the operation's own: of its kind, about its subject.
    if kind != row.task_type:
        raise InvalidArgument("kind", "is not the operation's task type")
    if subject != (row.subject_type, row.subject_id):
        raise InvalidArgument("subject_id", "is not the operation's subject")
    context_ref: str | None = row.context_ref
    return context_ref


def held_references(
    tx: Tx, operation_id: str, token: str, now: datetime
) -> frozenset[tuple[str, str]]:
    """The rows the operation refers to, as (table, id): its subject and its second
    reference, while ``token`` holds its live lease (``_held``): what a worker running it
    may read (ADR 62). One primary-key read, no lock: a read changes nothing a takeover
    races.

    Only an analysis (a task type of the registry, which admission alone starts) refers to
    a user's rows, and only of the kinds it takes: a producer's own operation naming a
    user's job or CV grants its worker nothing, so a stolen producer key and a stolen
    worker key together still read no row they name."""
    bounds.text("operation_id", operation_id, bounds.ID_MAX)
    bounds.text("lease_token", token, bounds.LEASE_TOKEN_MAX)
    row = _held(tx, _LEASE, operation_id, token, now)
    if row.task_type not in TASKS:
        return frozenset()
    task = TASKS.get(row.task_type)
    held: set[tuple[str, str]] = set()
    if row.subject_type == task.subject.name:
        held.add((task.subject.table, row.subject_id))
    if task.context is not None and row.context_ref:
        held.add((task.context.table, row.context_ref))
    return frozenset(held)
