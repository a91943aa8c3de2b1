"""The operator scope's SQL (ADR 19): reads across owners, actions as the owner.

Every function takes an ``OperatorTx``, the scope a caller enters on purpose
(``durable_ops.storage.tx``). Reads name no owner. A cancel or a retry reads
the operation's owner and runs the owner's own ``operations.cancel`` or
``operations.retry`` in that owner's scope, in the same transaction: the same
decision, the same guarded UPDATE, the same notification, nothing an owner
could not do.

Listing across owners walks ``created_at`` newest first, filtered; the indexes
serve the owner's listing, and an operator's list is rare enough not to need
its own.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import cast

from sqlalchemy import Table, bindparam, case, func, null, select

from durable_ops.model import bounds
from durable_ops.model.errors import NotFound
from durable_ops.model.operator import OperatorFilter
from durable_ops.model.states import OperationState
from durable_ops.storage import operations
from durable_ops.storage.operations.rows import lease_live
from durable_ops.storage.pages import Page, newest_first_page, page_size
from durable_ops.storage.schema import OperationAttempt, UserOperation
from durable_ops.storage.tx import OperatorTx, ScopeViolation, Tx

OPS = cast(Table, UserOperation.__table__)
_OWNER_OF = select(OPS.c.owner_user_id).where(OPS.c.id == bindparam("operation_id"))


def _operator(tx: Tx) -> OperatorTx:
    if not isinstance(tx, OperatorTx):
        raise ScopeViolation("operator storage runs only in the operator scope")
    return tx


def show(tx: OperatorTx, operation_id: str) -> tuple[UserOperation, list[OperationAttempt]]:
    """Any owner's operation and its attempts (oldest first), read as its owner reads them."""
    owner = owner_of(tx, operation_id)  # first: it refuses any scope but the operator's
    scope = tx.as_owner(owner)
    return operations.get(scope, operation_id), operations.attempts(scope, operation_id)


def owner_of(tx: OperatorTx, operation_id: str) -> str:
    owner = None
    if 0 < len(operation_id) <= bounds.ID_MAX:  # a longer id was never issued
        owner = _operator(tx).execute(_OWNER_OF, {"operation_id": operation_id}).scalar()
    if owner is None:
        raise NotFound("operation not found", code="operation_not_found")
    return str(owner)


def list_page(
    tx: OperatorTx, *, size: int, token: str, filters: OperatorFilter, now: datetime
) -> Page[UserOperation]:
    """Operations of every owner (or of ``filters.owner_id``), newest first."""
    size = page_size(size)  # first: with a bad filter as well, the bad size is answered
    filters = filters.validated()
    equal = (
        (OPS.c.owner_user_id, filters.owner_id),
        (OPS.c.state, filters.state),
        (OPS.c.task_type, filters.task_type),
        (OPS.c.failure_code, filters.failure_code),
    )
    matching = [column == value for column, value in equal if value]  # left empty: any
    created_before = filters.created_before(now)
    if created_before is not None:
        matching.append(OPS.c.created_at <= created_before)
    query = select(OPS).where(*matching)
    return newest_first_page(_operator(tx), query, size, token, operations.detached)


_BY_TYPE_AND_STATE = operations.each_active_state(
    lambda state: (
        select(
            OPS.c.task_type,
            OPS.c.state,
            func.count().label("total"),
            # Due since: a queued operation held for later (ADR 0050) is not waiting yet.
            func.min(case((operations.in_line(), OPS.c.not_before))).label("oldest"),
        )
        .where(OPS.c.state == state)
        .group_by(OPS.c.task_type, OPS.c.state)
    )
)


# A running operation's lease expiry once it has run out (null while it is live): counted,
# and the earliest, per task type. A seek on the state, reading the running rows only. Its
# own read: asked in the grouped read above, which the claim index covers without the
# lease's expiry, MariaDB read every row, finished ones too (test_read_costs.py).
_PAST_LEASE = case((lease_live(), null()), else_=OPS.c.lease_expires_at)
_RUNNING_PAST_LEASE = (
    select(
        OPS.c.task_type,
        func.count(_PAST_LEASE).label("past"),
        func.min(_PAST_LEASE).label("overdue_since"),
    )
    .where(OPS.c.state == OperationState.RUNNING)
    .group_by(OPS.c.task_type)
)


@dataclass(frozen=True)
class QueueDepth:
    """One task type's unfinished work: operations by state, and since when the
    longest-waiting of its queued ones has been due (``None`` with none waiting: none
    queued, or all scheduled for later). Of the running ones, those whose lease ran out
    and since when the first did (read only when ``queue_depths`` is given ``now``)."""

    task_type: str
    counts: dict[OperationState, int]
    oldest_queued_at: datetime | None
    running_past_lease: int = 0
    lease_overdue_since: datetime | None = None


def queue_depths(tx: OperatorTx, now: datetime | None = None) -> list[QueueDepth]:
    """Per task type with unfinished work, by name: one grouped read of the unfinished
    states (the claim index leads with the state; finished rows are not read). The
    console's queues and the Operations process's gauges. With ``now``, a second read
    of the running rows counts those past their lease (``opsctl status``: the sweeper
    ends them within seconds, so any left say it is behind)."""
    found: dict[str, QueueDepth] = {}
    for row in _operator(tx).execute(_BY_TYPE_AND_STATE):
        depth = found.setdefault(row.task_type, QueueDepth(row.task_type, {}, None))
        depth.counts[OperationState(row.state)] = int(row.total)
        if row.state == OperationState.QUEUED:
            found[row.task_type] = replace(depth, oldest_queued_at=row.oldest)
    if now is not None:
        for row in tx.execute(_RUNNING_PAST_LEASE, {"now": now}):
            if row.task_type in found and row.past:  # running rows read after the first
                found[row.task_type] = replace(
                    found[row.task_type],
                    running_past_lease=int(row.past),
                    lease_overdue_since=row.overdue_since,
                )
    return [found[name] for name in sorted(found)]


def cancel(tx: OperatorTx, operation_id: str, now: datetime) -> UserOperation:
    """The owner's cancel, in the owner's scope."""
    owner = owner_of(tx, operation_id)
    return operations.cancel(tx.as_owner(owner), operation_id, now)


def retry(tx: OperatorTx, operation_id: str, now: datetime) -> UserOperation:
    """The owner's manual retry, in the owner's scope."""
    owner = owner_of(tx, operation_id)
    return operations.retry(tx.as_owner(owner), operation_id, now)
