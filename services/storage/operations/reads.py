"""Reads of the operation aggregate: the owner's, and the neutral watches' by id."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import ColumnElement, Select, String, bindparam, literal_column, select

from durable_ops.model import bounds
from durable_ops.model.states import PENDING_STATES, OperationState
from durable_ops.storage.operations.claims import claimable
from durable_ops.storage.operations.rows import (
    ATTEMPTS,
    OPS,
    OWNED,
    Query,
    S,
    batches,
    by_id,
    detached,
    each_active_state,
    numbered,
    of_type,
    one,
    one_statement,
    operation,
)
from durable_ops.storage.pages import Page, newest_first_page
from durable_ops.storage.schema import OperationAttempt, UserOperation
from durable_ops.storage.tx import SCOPE_OWNER, ScopeViolation, Tx

_GET = select(OPS).where(OPS.c.id == bindparam("operation_id"), OWNED)
_GET_LOCKED = _GET.with_for_update()


def _equal(*columns: str) -> list[ColumnElement[bool]]:
    """Each of these columns equal to the parameter of its name."""
    return [OPS.c[name] == bindparam(name) for name in columns]


_BY_KEY = select(OPS).where(*_equal("task_type", "idempotency_key"), OWNED)
_LATEST_FOR_SUBJECT = (
    select(OPS)
    .where(*_equal("task_type", "subject_type", "subject_id"), OWNED)
    .order_by(OPS.c.created_at.desc(), OPS.c.id.desc())
    .limit(1)
)
_ACTIVE_FOR_SUBJECT = _LATEST_FOR_SUBJECT.where(
    OPS.c.state.in_([state.value for state in (*PENDING_STATES, S.RUNNING)])
)
_ATTEMPTS_OF = (
    select(ATTEMPTS)
    .where(
        ATTEMPTS.c.operation_id == bindparam("operation_id"),
        ATTEMPTS.c.owner_user_id == SCOPE_OWNER,
    )
    .order_by(ATTEMPTS.c.started_at, ATTEMPTS.c.id)
)


def get(tx: Tx, operation_id: str, *, lock: bool = False) -> UserOperation:
    """The scope owner's operation (another owner's is not found); ``lock`` holds its row
    for the transaction, as every decided transition reads it."""
    return operation(by_id(tx, _GET_LOCKED if lock else _GET, operation_id))


def list_page(
    tx: Tx,
    *,
    size: int,
    token: str,
    state: OperationState | None = None,
    task_type: str = "",
) -> Page[UserOperation]:
    query: Select[Any] = select(OPS).where(OWNED)
    if state is not None:
        query = _through(query.where(OPS.c.state == state), _BY_STATE)
    if task_type:
        bounds.task_type(task_type)
        if state is None:
            query = _through(query.where(OPS.c.task_type == task_type), _BY_TYPE)
        else:
            sqlite = tx.connection.dialect.name == "sqlite"
            query = query.where((_NOT_A_KEY if sqlite else OPS.c.task_type) == task_type)
    listing = f"operations?state={state.value if state else ''}&task_type={task_type}"
    return newest_first_page(tx, query, size, token, detached, listing=listing)


# A filtered page is one seek of its filter's listing index and a walk of the page's rows
# (0025), the index named rather than left to the planner: MariaDB 10.11 took the rows of
# the state of every owner (``ix_user_operations_state_deadline``) and sorted them, or
# walked the owner's whole history newest first (``ix_user_operations_owner_listing``)
# for a state the owner holds few of. SQLite reads no such hint (nor does SQLAlchemy
# write one for it) and finds these indexes itself, but for a state and a type asked
# together it walked every operation of the type: there the type's term is kept from the
# choice (SQLite's unary ``+``), and the state's index is walked, as on MariaDB.
_BY_STATE = "ix_user_operations_owner_state_listing"
_BY_TYPE = "ix_user_operations_owner_type_listing"
_NOT_A_KEY = literal_column("+user_operations.task_type", String)


def _through(query: Select[Any], index: str) -> Select[Any]:
    for dialect in ("mysql", "mariadb"):
        query = query.with_hint(OPS, f"FORCE INDEX ({index})", dialect_name=dialect)
    return query


def find_by_key(tx: Tx, task_type: str, idempotency_key: str) -> UserOperation | None:
    return one(tx, _BY_KEY, {"task_type": task_type, "idempotency_key": idempotency_key})


def active_for_subject(
    tx: Tx, task_type: str, subject_type: str, subject_id: str
) -> UserOperation | None:
    subject = {"task_type": task_type, "subject_type": subject_type, "subject_id": subject_id}
    return one(tx, _ACTIVE_FOR_SUBJECT, subject)


def latest_for_subject(
    tx: Tx, task_type: str, subject_type: str, subject_id: str
) -> UserOperation | None:
    subject = {"task_type": task_type, "subject_type": subject_type, "subject_id": subject_id}
    return one(tx, _LATEST_FOR_SUBJECT, subject)


def reading_row() -> ColumnElement[bool]:
    """The scope owner's operations that read one workspace row (``:row_type``, ``:row_id``):
    as their subject, or as their second reference. A reference is a fresh uuid4, so
    ``context_ref`` alone names one row whatever its kind."""
    about = (OPS.c.subject_type == bindparam("row_type")) & (
        OPS.c.subject_id == bindparam("row_id")
    )
    return OWNED & (about | (OPS.c.context_ref == bindparam("row_id")))


# One seek of ix_user_operations_owner_state per unfinished state (ADR 0052): an owner's
# unfinished operations are few (admission's capacity bounds them), its history is not read.
_ACTIVE_READING = each_active_state(
    lambda state: select(OPS.c.id, OPS.c.state, OPS.c.cancel_requested, OPS.c.created_at).where(
        OPS.c.state == state, reading_row()
    )
)


@dataclass(frozen=True)
class Reader:
    """An unfinished operation that reads a row: what a refusal to delete the row names."""

    operation_id: str
    state: OperationState
    cancel_requested: bool


def active_reading(tx: Tx, row_type: str, row_id: str) -> Reader | None:
    """The newest of the scope owner's unfinished operations that read the row, or None."""
    rows = tx.execute(_ACTIVE_READING, {"row_type": row_type, "row_id": row_id}).all()
    if not rows:
        return None
    newest = max(rows, key=lambda row: (row.created_at, row.id))
    return Reader(newest.id, OperationState(newest.state), bool(newest.cancel_requested))


def attempts(tx: Tx, operation_id: str) -> list[OperationAttempt]:
    """The scope owner's record of an operation's attempts, oldest first (another owner's: none)."""
    rows = tx.execute(_ATTEMPTS_OF, {"operation_id": operation_id})
    return [OperationAttempt(**row._mapping) for row in rows]


# ---- the neutral watches: many operations by id ----------------------------------------

IDS_PER_QUERY_MAX = 1000  # ids per IN list; a replica watching more asks in parts
_VERSIONS_AMONG = select(OPS.c.id, OPS.c.state, OPS.c.updated_at, OPS.c.cancel_requested).where(
    OPS.c.id.in_(bindparam("ids", expanding=True))
)


@cache
def _claimable_kinds(count: int) -> Query:
    """For each of ``count`` kinds (``of_state_n``, ``of_type_n``): the kind, if an operation
    of it is claimable; one seek of the claim index each (ADR 0051)."""
    return one_statement(
        [
            select(OPS.c.state, OPS.c.task_type)
            # limited: a full key's backlog wakes no claim (ADR 0048)
            .where(*claimable(bindparam(f"of_state_{n}"), limited=True), of_type(n))
            .limit(1)
            for n in range(count)
        ]
    )


@dataclass(frozen=True)
class Version:
    """What a waiter compares: is the operation done, is it still the one it saw, and did
    its owner ask to cancel."""

    state: OperationState
    updated_at: datetime
    cancel_requested: bool = False


def versions_among(tx: Tx, operation_ids: Sequence[str]) -> dict[str, Version]:
    """The versions of those of these operations that exist: primary-key lookups, in chunks
    a statement can carry."""
    if tx.owner_id is not None:
        raise ScopeViolation("the watches run in the neutral scope")
    found: dict[str, Version] = {}
    for ids in batches(operation_ids, IDS_PER_QUERY_MAX):
        for row in tx.execute(_VERSIONS_AMONG, {"ids": list(ids)}):
            state = OperationState(row.state)
            found[row.id] = Version(state, row.updated_at, bool(row.cancel_requested))
    return found


def claimable_kinds(
    tx: Tx, now: datetime, kinds: Collection[tuple[str, str]]
) -> set[tuple[str, str]]:
    """Which of these kinds, (state, task type), a claim could take now.

    Waiting claims ask this once per poll for the kinds they all wait for, and
    only the claims that match try to claim.
    """
    if tx.owner_id is not None:
        raise ScopeViolation("the claim poll runs in the neutral scope")
    if not kinds:
        return set()
    each = [{"of_state": state, "of_type": task_type} for state, task_type in sorted(kinds)]
    rows = tx.execute(_claimable_kinds(len(kinds)), numbered(each, now=now))
    return {(row.state, row.task_type) for row in rows}
