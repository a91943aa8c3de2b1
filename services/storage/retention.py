"""Retention's SQL (ADR 0021): prune finished operations, keep their keys as tombstones.

A prune batch, in one transaction: lock up to ``limit`` of the oldest terminal
operations finished before the horizon (``FOR UPDATE SKIP LOCKED`` on MariaDB:
a busy row is left for the next batch), insert their tombstones, delete them.
The schema's foreign keys do the rest in the same transaction: the attempts
go with the operation (``CASCADE``), a notification and a published workspace
note stay and lose only their operation id (``SET NULL``). The DELETE repeats
the facts it was chosen on, and a batch whose DELETE does not match every row
it read is rolled back whole.

Tombstones past their own, longer horizon are forgotten in batches the same
way; past it, the key may run again.

A create reads the tombstone of its key (``tombstone_for``) after its INSERT
succeeded: a prune that deleted the same key's operation meanwhile holds that
row's unique-key lock until it commits its tombstone, so the INSERT waits for
it and the read that follows sees the tombstone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import (
    ColumnElement,
    Delete,
    Exists,
    Insert,
    Select,
    Table,
    bindparam,
    delete,
    exists,
    func,
    insert,
    select,
)

from durable_ops.model.errors import InvalidTransition, NotFound
from durable_ops.model.retention import RetentionPolicy
from durable_ops.model.states import TERMINAL_STATES
from durable_ops.storage.schema import OperationTombstone, UserOperation, UtcDateTime
from durable_ops.storage.tx import SCOPE_OWNER, OperatorTx, Tx

OPS = cast(Table, UserOperation.__table__)
TOMBSTONES = cast(Table, OperationTombstone.__table__)
_TERMINAL = sorted(TERMINAL_STATES)
# What a tombstone copies of the row it replaces (in the database), besides the state.
_COPIED = ("id", "owner_user_id", "task_type", "idempotency_key", "request_hash", "finished_at")


def _finished_before(table: Table, *where: ColumnElement[bool]) -> tuple[Select[Any], Select[Any]]:
    """The rows of ``table`` finished before the horizon: the oldest ``limit`` of them, locked
    (``SKIP LOCKED``: a busy row is left for the next batch), and how many there are."""
    old = (table.c.finished_at < bindparam("finished_before"), *where)
    oldest = (
        select(table.c.id)
        .where(*old)
        .order_by(table.c.finished_at, table.c.id)
        .limit(bindparam("limit"))
        .with_for_update(skip_locked=True)
    )
    return oldest, select(func.count()).where(*old)


def _burying(*where: ColumnElement[bool]) -> tuple[Insert, Delete]:
    """The INSERT of the tombstones of the operations ``ids``, and their DELETE, which
    repeats the facts they were chosen on."""
    ids = OPS.c.id.in_(bindparam("ids", expanding=True))
    deleted_at = bindparam("deleted_at", type_=UtcDateTime())
    copies = select(*(OPS.c[name] for name in _COPIED), OPS.c.state, deleted_at).where(ids, *where)
    finished = (OPS.c.state.in_(_TERMINAL), OPS.c.finished_at.is_not(None))
    return (
        insert(TOMBSTONES).from_select([*_COPIED, "final_state", "deleted_at"], copies),
        delete(OPS).where(ids, *finished, *where),
    )


_PRUNABLE, _COUNT_PRUNABLE = _finished_before(OPS, OPS.c.state.in_(_TERMINAL))
_FORGETTABLE, _COUNT_FORGETTABLE = _finished_before(TOMBSTONES)
# Read locked, as a retry reads it: a delete and a racing retry (or prune) go wholly one
# after the other, and the delete answers from the row as it then is.
_FINISHED_OWN = (
    select(OPS.c.id, OPS.c.task_type, OPS.c.state, OPS.c.finished_at)
    .where(OPS.c.id == bindparam("operation_id"), OPS.c.owner_user_id == SCOPE_OWNER)
    .with_for_update()
)
_BURY = _burying()
_BURY_OWN = _burying(OPS.c.owner_user_id == SCOPE_OWNER)  # an owner's scope binds the owner
_FORGET = delete(TOMBSTONES).where(TOMBSTONES.c.id.in_(bindparam("ids", expanding=True)))


def _of_key(
    task_type: ColumnElement[Any], idempotency_key: ColumnElement[Any]
) -> tuple[ColumnElement[bool], ...]:
    """The owner's tombstone of a key (owner, task type and key are unique together)."""
    return (
        TOMBSTONES.c.owner_user_id == SCOPE_OWNER,
        TOMBSTONES.c.task_type == task_type,
        TOMBSTONES.c.idempotency_key == idempotency_key,
    )


_TOMBSTONE_BY_KEY = select(TOMBSTONES).where(
    *_of_key(bindparam("task_type"), bindparam("idempotency_key"))
)


class PruneRaced(RuntimeError):
    """A batch's DELETE missed a row it had read: rolled back, the next batch tries again."""


@dataclass(frozen=True)
class PruneBatch:
    pruned: int
    forgotten: int


@dataclass(frozen=True)
class Prunable:
    operations: int
    tombstones: int


def _bury(tx: Tx, ids: Sequence[str], now: datetime) -> int:
    """Tombstones for the operations ``ids`` (locked, terminal), then the operations
    deleted; all or nothing."""
    if not ids:
        return 0
    inserting, deleting = _BURY if tx.owner_id is None else _BURY_OWN
    tx.execute(inserting, {"ids": ids, "deleted_at": now})
    deleted = tx.execute(deleting, {"ids": ids}).rowcount
    if deleted != len(ids):
        raise PruneRaced(f"deleted {deleted} of the {len(ids)} operations read")
    return deleted


def prune_batch(tx: OperatorTx, policy: RetentionPolicy, now: datetime, limit: int) -> PruneBatch:
    """At most ``limit`` operations pruned and ``limit`` tombstones forgotten, oldest first."""
    finished_before = policy.operations_finished_before(now)
    ids = tx.execute(_PRUNABLE, {"finished_before": finished_before, "limit": limit}).scalars()
    pruned = _bury(tx, list(ids), now)
    finished_before = policy.tombstones_finished_before(now)
    keys = tx.execute(_FORGETTABLE, {"finished_before": finished_before, "limit": limit})
    forgettable = list(keys.scalars())
    forgotten = tx.execute(_FORGET, {"ids": forgettable}).rowcount if forgettable else 0
    return PruneBatch(pruned=pruned, forgotten=forgotten)


def prunable(tx: OperatorTx, policy: RetentionPolicy, now: datetime) -> Prunable:
    """How many operations and tombstones a prune with ``policy`` would remove now."""
    operations = tx.execute(
        _COUNT_PRUNABLE, {"finished_before": policy.operations_finished_before(now)}
    ).scalar_one()
    tombstones = tx.execute(
        _COUNT_FORGETTABLE, {"finished_before": policy.tombstones_finished_before(now)}
    ).scalar_one()
    return Prunable(operations=int(operations), tombstones=int(tombstones))


def delete_finished(
    tx: Tx, operation_id: str, now: datetime, may_delete: Callable[[str], None]
) -> None:
    """The owner's own finished operation removed, its key kept (google.longrunning Delete).
    ``may_delete`` raises when the caller may not delete an operation of this task type."""
    row = tx.execute(_FINISHED_OWN, {"operation_id": operation_id}).one_or_none()
    if row is None:
        raise NotFound("operation not found", code="operation_not_found")
    may_delete(row.task_type)
    if row.finished_at is None or row.state not in TERMINAL_STATES:
        raise InvalidTransition(
            "only a finished operation can be deleted; cancel it first", code="not_terminal"
        )
    _bury(tx, [row.id], now)


def tombstoned(task_type: ColumnElement[Any], idempotency_key: ColumnElement[Any]) -> Exists:
    """Whether the owner has a tombstone of this key: a create's guard, inside its INSERT."""
    return exists().where(*_of_key(task_type, idempotency_key))


def tombstone_for(tx: Tx, task_type: str, idempotency_key: str) -> OperationTombstone | None:
    """The owner's tombstone of this key, if its operation was pruned."""
    row = tx.execute(
        _TOMBSTONE_BY_KEY, {"task_type": task_type, "idempotency_key": idempotency_key}
    ).one_or_none()
    return None if row is None else OperationTombstone(**row._mapping)
