"""Paused task types on the database (issue 37, point 4; ADR 0047).

An operator pauses a task type (``opsctl tasks pause TYPE``): a row in
``paused_task_types``, with who and when. The claim's own statement leaves out
every paused type (``unless_paused``, a subquery on this small table: no
statement is added to a claim, and no row of the type is read), and so does the
claim poll, so a waiting claim is not woken for work it may not take. A running
operation is not touched: it finishes, and what it would retry waits, queued,
until ``resume`` deletes the row. Admission refuses a new analysis of a paused
type (``is_paused``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import cast

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    ScalarSelect,
    Table,
    bindparam,
    delete,
    exists,
    insert,
    select,
)

from durable_ops.model import bounds
from durable_ops.storage.events import Requeued, publish
from durable_ops.storage.schema import PausedTaskType, UserOperation
from durable_ops.storage.tx import Tx

PAUSED = cast(Table, PausedTaskType.__table__)
OPS = cast(Table, UserOperation.__table__)


def not_paused() -> ColumnElement[bool]:
    """The operation's task type is not paused: a claim's guard on a row it picks by id."""
    return OPS.c.task_type.not_in(select(PAUSED.c.task_type).scalar_subquery())


def unless_paused(task_type: BindParameter[str]) -> ScalarSelect[str]:
    """``task_type``, or NULL when it is paused: the claim's and the claim poll's guard.

    Compared with the operation's type, it is the key of the claim index's seek,
    answered once before any row is read, so a paused type's backlog is not
    walked (ADR 0051); a guard on each row would read every one of them.
    """
    paused = exists().where(PAUSED.c.task_type == task_type)
    return select(task_type).where(~paused).scalar_subquery()


_PAUSE = insert(PAUSED)  # the columns: the parameters
_RESUME = delete(PAUSED).where(PAUSED.c.task_type == bindparam("task_type"))
_ALL = select(PAUSED).order_by(PAUSED.c.task_type)
_ONE = select(PAUSED).where(PAUSED.c.task_type == bindparam("task_type"))


@dataclass(frozen=True)
class Pause:
    task_type: str
    paused_by: str
    paused_at: datetime


def pause(tx: Tx, task_type: str, by: str, now: datetime) -> bool:
    """Pause ``task_type``; False when it was paused already (the first pause is kept)."""
    bounds.task_type(task_type)
    row = {"task_type": task_type, "paused_by": by, "paused_at": now}
    return tx.insert_if_absent(_PAUSE, row) == 1


def resume(tx: Tx, task_type: str) -> bool:
    """Resume ``task_type``; False when it was not paused. Its queued work is claimable
    again at COMMIT: this replica's waiting claims try at once, the others' at their
    next poll."""
    bounds.task_type(task_type)
    resumed = tx.write(_RESUME, {"task_type": task_type}) == 1
    if resumed:
        publish(Requeued())
    return resumed


def paused(tx: Tx) -> list[Pause]:
    """Every paused task type, by name."""
    return [Pause(**row._mapping) for row in tx.execute(_ALL)]


def find(tx: Tx, task_type: str) -> Pause | None:
    """``task_type``'s pause, None when it is not paused."""
    row = tx.execute(_ONE, {"task_type": task_type}).first()
    return None if row is None else Pause(**row._mapping)


def is_paused(tx: Tx, task_type: str) -> bool:
    return find(tx, task_type) is not None
