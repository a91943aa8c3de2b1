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

from sqlalchemy import ColumnElement, Exists, Table, bindparam, delete, exists, func, insert, select

from durable_ops.model.errors import InvalidTransition, NotFound
from durable_ops.model.retention import RetentionPolicy
from durable_ops.model.states import TERMINAL_STATES
from durable_ops.storage.schema import OperationTombstone, UserOperation, UtcDateTime
from durable_ops.storage.tx import SCOPE_OWNER, OperatorTx, Tx

OPS = cast(Table, UserOperation.__table__)
TOMBSTONES = cast(Table, OperationTombstone.__table__)
_TERMINAL = sorted(TERMINAL_STATES)
_BURIED_COLUMNS = (
    OPS.c.id,
    OPS.c.owner_user_id,
    OPS.c.task_type,
    OPS.c.idempotency_key,
    OPS.c.request_hash,
    OPS.c.state,
    OPS.c.finished_at,
)
_PRUNABLE = (
    select(OPS.c.id)
    .where(OPS.c.finished_at < bindparam("finished_before"), OPS.c.state.in_(_TERMINAL))
    .order_by(OPS.c.finished_at, OPS.c.id)
    .limit(bindparam("limit"))
    .with_for_update(skip_locked=True)
)
_FINISHED_OWN = select(OPS.c.id, OPS.c.task_type, OPS.c.state, OPS.c.finished_at).where(
    OPS.c.id == bindparam("operation_id"), OPS.c.owner_user_id == SCOPE_OWNER
)
_DELETE_FINISHED = delete(OPS).where(
    OPS.c.id.in_(bindparam("ids", expanding=True)),
    OPS.c.state.in_(_TERMINAL),
    OPS.c.finished_at.is_not(None),
)
# The tombstones are copied from the rows they replace, in the database.
_TOMBSTONE_COLUMNS = (
    "id",
    "owner_user_id",
    "task_type",
    "idempotency_key",
    "request_hash",
    "final_state",
    "finished_at",
    "deleted_at",
)
_TOMBSTONES_OF = select(*_BURIED_COLUMNS, bindparam("deleted_at", type_=UtcDateTime())).where(
    OPS.c.id.in_(bindparam("ids", expanding=True))
)
_INSERT_TOMBSTONES = insert(TOMBSTONES).from_select(_TOMBSTONE_COLUMNS, _TOMBSTONES_OF)
# The same two in an owner's scope, which binds the owner itself.
_DELETE_OWN_FINISHED = _DELETE_FINISHED.where(OPS.c.owner_user_id == SCOPE_OWNER)
_INSERT_OWN_TOMBSTONES = insert(TOMBSTONES).from_select(
    _TOMBSTONE_COLUMNS, _TOMBSTONES_OF.where(OPS.c.owner_user_id == SCOPE_OWNER)
)
_FORGETTABLE = (
    select(TOMBSTONES.c.id)
    .where(TOMBSTONES.c.finished_at < bindparam("finished_before"))
    .order_by(TOMBSTONES.c.finished_at, TOMBSTONES.c.id)
    .limit(bindparam("limit"))
    .with_for_update(skip_locked=True)
)
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
_COUNT_PRUNABLE = select(func.count()).where(
    OPS.c.finished_at < bindparam("finished_before"), OPS.c.state.in_(_TERMINAL)
)
_COUNT_FORGETTABLE = select(func.count()).where(
    TOMBSTONES.c.finished_at < bindparam("finished_before")
)


class PruneRaced(RuntimeError):
    """A batch's DELETE missed a row it had read: rolled back, the next batch tries again."""


@dataclass(frozen=True)
class PruneBatch:
    pruned: int
    forgotten: int

    @property
    def total(self) -> int:
        return self.pruned + self.forgotten


@dataclass(frozen=True)
class Prunable:
    operations: int
    tombstones: int


def _bury(tx: Tx, ids: Sequence[str], now: datetime) -> int:
    """Tombstones for the operations ``ids`` (locked, terminal), then the operations
    deleted; all or nothing."""
    if not ids:
        return 0
    owned = tx.owner_id is not None
    tx.execute(
        _INSERT_OWN_TOMBSTONES if owned else _INSERT_TOMBSTONES, {"ids": ids, "deleted_at": now}
    )
    deleted = tx.execute(_DELETE_OWN_FINISHED if owned else _DELETE_FINISHED, {"ids": ids}).rowcount
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
    forgotten = 0
    if forgettable:
        forgotten = tx.execute(_FORGET, {"ids": forgettable}).rowcount
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


def _any_task(_task_type: str) -> None:
    """Any caller in the owner's scope may: the scope already checked whose it is."""


def delete_finished(
    tx: Tx, operation_id: str, now: datetime, may_delete: Callable[[str], None] = _any_task
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


__all__ = [
    "Prunable",
    "PruneBatch",
    "PruneRaced",
    "delete_finished",
    "prunable",
    "prune_batch",
    "tombstone_for",
    "tombstoned",
]
