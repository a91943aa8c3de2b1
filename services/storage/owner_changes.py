"""What an owner's watch (``WatchOwner``) reads: the owner's operations changed since a time.

Every writer of an operation sets its ``updated_at`` (a beat too, and a beat's
draft shares its time), so one cursor, a time, finds every change of state,
progress and answer so far. ``ix_user_operations_owner_updated`` serves both
reads: the owner's changes since the cursor, and, for the shared poll of every
watch on a replica, each watched owner's newest change.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import bindparam, func, select

from durable_ops.storage.operations.reads import IDS_PER_QUERY_MAX
from durable_ops.storage.operations.rows import OPS, OWNED, operation
from durable_ops.storage.schema import UserOperation
from durable_ops.storage.tx import ScopeViolation, Tx

CHANGES_MAX = 100  # one read's worth; a watch reads again from the last one it got

_SINCE = (
    select(OPS)
    .where(OWNED, OPS.c.updated_at >= bindparam("after"))
    .order_by(OPS.c.updated_at, OPS.c.id)
    .limit(CHANGES_MAX)
)
_NEWEST = (
    select(OPS.c.owner_user_id, func.max(OPS.c.updated_at).label("newest"))
    .where(OPS.c.owner_user_id.in_(bindparam("owners", expanding=True)))
    .group_by(OPS.c.owner_user_id)
)


def since(tx: Tx, after: datetime) -> list[UserOperation]:
    """The scope owner's operations written at or after ``after``, oldest change first
    (at most ``CHANGES_MAX``): the watch's cursor is inclusive, so a change written in the
    same microsecond as the last one seen is never skipped (it may come twice)."""
    return [operation(row) for row in tx.execute(_SINCE, {"after": after})]


def newest_among(tx: Tx, owners: Sequence[str]) -> dict[str, datetime]:
    """Each of these owners' newest ``updated_at`` (neutral scope: the shared poll)."""
    if tx.owner_id is not None:
        raise ScopeViolation("the owners' watch polls in the neutral scope")
    found: dict[str, datetime] = {}
    for start in range(0, len(owners), IDS_PER_QUERY_MAX):
        chunk = list(owners[start : start + IDS_PER_QUERY_MAX])
        for row in tx.execute(_NEWEST, {"owners": chunk}):
            found[row.owner_user_id] = row.newest
    return found
