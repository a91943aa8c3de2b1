"""Aging (issue 37 point 1, ADR 0049): the sweeper raises the priority of operations that
have waited, a level per ``AGING_STEP``, at most ``AGING_MAX`` levels above their own.

Bounded work per sweep, never the backlog: the queued priority levels are found one
index seek each (``MAX(priority) … < p``, from the top), and of each level below the
top only its head (the queue index, ``LIMIT ROWS_MAX``) is read, locked ``SKIP
LOCKED``; the rows that have waited long enough get their new priority in one UPDATE.
An aged row keeps its turn (``fair_tag``), so at its new level it is among the first.
``base_priority`` keeps the priority it was created with.
"""

from __future__ import annotations

from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import Update, bindparam, func, select, update

from durable_ops.model import bounds, fairness, lifecycle
from durable_ops.storage.operations.rows import OPS, ROWS_MAX, batches, in_line, numbered
from durable_ops.storage.per_row import per_row, row_ids
from durable_ops.storage.tx import Tx

_QUEUED = OPS.c.state == lifecycle.CREATED.state
_NEXT_LEVEL = select(func.max(OPS.c.priority)).where(
    _QUEUED, in_line(), OPS.c.priority < bindparam("below")
)
_HEAD = (
    select(OPS.c.id, OPS.c.priority, OPS.c.base_priority, OPS.c.not_before)
    .where(
        _QUEUED,
        in_line(),
        OPS.c.priority == bindparam("level"),
        OPS.c.not_before <= bindparam("waited_since"),
    )
    .order_by(OPS.c.fair_tag)
    .limit(ROWS_MAX)
    .with_for_update(skip_locked=True)
)


@cache
def _raise(count: int) -> Update:
    ids = row_ids("id", count)
    return (
        update(OPS)
        .where(OPS.c.id.in_(ids), _QUEUED)
        # In this order: MariaDB's SET sees the values the clauses before it wrote.
        .ordered_values(
            (OPS.c.base_priority, func.coalesce(OPS.c.base_priority, OPS.c.priority)),
            (OPS.c.priority, per_row(OPS.c.id, ids, "priority")),
        )
    )


def age(tx: Tx, now: datetime) -> int:
    """Raise the priorities due a rise; how many operations rose."""
    levels: list[int] = []
    below = bounds.PRIORITY_RANGE[1] + 1
    while len(levels) < fairness.AGING_LEVELS_MAX:
        level = tx.execute(_NEXT_LEVEL, {"below": below}).scalar()
        if level is None:
            break
        levels.append(level)
        below = level
    risen: list[dict[str, Any]] = []
    for level in levels[1:]:  # the top level has nothing to rise to
        for row in tx.execute(_HEAD, {"level": level, "waited_since": now - fairness.AGING_STEP}):
            base = row.priority if row.base_priority is None else row.base_priority
            new = fairness.aged_priority(base, now - row.not_before)
            if new > row.priority:
                risen.append({"id": row.id, "priority": new})
    for part in batches(risen):
        tx.write(_raise(len(part)), numbered(part))
    return len(risen)
