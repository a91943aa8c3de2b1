"""What an owner's watch (``WatchOwner``) reads: the owner's operations changed since a time.

Every writer of an operation sets its ``updated_at`` (a beat too, and a beat's
draft shares its time), so one cursor, a time, finds every change of state,
progress and answer so far. ``ix_user_operations_owner_updated`` serves both
reads: the owner's changes since the cursor, and, for the shared poll of every
watch on a replica, each watched owner's newest change (a seek per owner, not
the owner's history).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import CompoundSelect, Select, bindparam, or_, select

from durable_ops.storage.operations.rows import OPS, OWNED, one_statement, operation
from durable_ops.storage.schema import UserOperation
from durable_ops.storage.tx import Tx

CHANGES_MAX = 100  # one read's worth; a watch reads again from the last one it got

_SINCE = (
    select(OPS)
    .where(
        OWNED,
        OPS.c.updated_at >= bindparam("after"),  # the index's range; the id only filters it
        or_(OPS.c.updated_at > bindparam("after"), OPS.c.id > bindparam("after_id")),
    )
    .order_by(OPS.c.updated_at, OPS.c.id)
    .limit(CHANGES_MAX)
)
# One ``ORDER BY … DESC LIMIT 1`` per owner: a seek to the end of the owner's part of
# the index on both engines, and no row for an owner with no operation yet. A GROUP BY
# over an IN list read every operation each owner ever made, ten times a second
# (tests/integration/test_read_costs.py counts the reads).
OWNERS_PER_QUERY = 500  # SQLite takes at most 500 SELECTs in one compound


@cache
def _newest(owners: int) -> Select[Any] | CompoundSelect[Any]:
    parts = [
        select(OPS.c.owner_user_id, OPS.c.updated_at.label("newest"))
        .where(OPS.c.owner_user_id == bindparam(f"owner_{n}"))
        .order_by(OPS.c.updated_at.desc())
        .limit(1)
        for n in range(owners)
    ]
    return one_statement(parts)


def since(tx: Tx, after: datetime, after_id: str = "") -> list[UserOperation]:
    """The scope owner's operations written at or after ``after``, oldest change first
    (by time, then id; at most ``CHANGES_MAX``): the watch's cursor is inclusive, so a
    change written in the same microsecond as the last one seen is never skipped (it may
    come twice). ``after_id``: of the operations written at ``after``, only those after
    it, to read on past a full read that ended inside one microsecond ("": all of them)."""
    rows = tx.execute(_SINCE, {"after": after, "after_id": after_id})
    return [operation(row) for row in rows]


def newest_among(tx: Tx, owners: Sequence[str]) -> dict[str, datetime]:
    """Each of these owners' newest ``updated_at`` (neutral scope: the shared poll; in an
    owner scope ``Tx`` refuses the statement, which does not filter by ``SCOPE_OWNER``)."""
    found: dict[str, datetime] = {}
    for start in range(0, len(owners), OWNERS_PER_QUERY):
        chunk = owners[start : start + OWNERS_PER_QUERY]
        asked = {f"owner_{n}": owner for n, owner in enumerate(chunk)}
        for row in tx.execute(_newest(len(chunk)), asked):
            found[row.owner_user_id] = row.newest
    return found
