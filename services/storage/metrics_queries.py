"""The SQL behind the domain gauges, read in the neutral scope at scrape time.

Two cheap statements: operations counted by state and task type (one GROUP BY;
the claim index leads with ``state``) and since when the longest-waiting queued
operation has been due (the earliest ``not_before`` in the claim's line: one
scheduled for later is not waiting yet), plus notifications stored by outcome.
Callers cache the answers (a scrape every few seconds must not become a query
per scrape per replica).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import cast

from sqlalchemy import Table, func, select

from durable_ops.model.states import OperationState
from durable_ops.storage.operations import in_line
from durable_ops.storage.schema import UserNotification, UserOperation
from durable_ops.storage.tx import Tx

OPS = cast(Table, UserOperation.__table__)
NOTIFICATIONS = cast(Table, UserNotification.__table__)

_BY_STATE_AND_TYPE = select(OPS.c.state, OPS.c.task_type, func.count()).group_by(
    OPS.c.state, OPS.c.task_type
)
_OLDEST_QUEUED = select(func.min(OPS.c.not_before)).where(
    OPS.c.state == OperationState.QUEUED.value, in_line()
)
_NOTIFICATIONS_BY_OUTCOME = select(NOTIFICATIONS.c.outcome, func.count()).group_by(
    NOTIFICATIONS.c.outcome
)


@dataclass(frozen=True)
class OperationCounts:
    by_state_and_type: dict[tuple[str, str], int]
    oldest_queued_at: datetime | None


def operation_counts(tx: Tx) -> OperationCounts:
    """Every owner's operations by (state, task type), and since when the longest-waiting
    queued one has been due."""
    counts: dict[tuple[str, str], int] = {}
    for row in tx.execute(_BY_STATE_AND_TYPE).all():
        state, task_type, count = tuple(row)
        counts[(str(state), str(task_type))] = int(count)
    oldest = tx.execute(_OLDEST_QUEUED).scalar_one_or_none()
    return OperationCounts(counts, oldest)


def notification_counts(tx: Tx) -> dict[str, int]:
    """Every owner's stored notifications by outcome."""
    counts: dict[str, int] = {}
    for row in tx.execute(_NOTIFICATIONS_BY_OUTCOME).all():
        outcome, count = tuple(row)
        counts[str(outcome)] = int(count)
    return counts
