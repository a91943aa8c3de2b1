"""The SQL behind the Operations process's gauges, read in the neutral scope at scrape time.

Two statements, each bounded by the work still to do rather than by history:
unfinished operations counted by state and task type (a range of the claim
index, which leads with ``state``: finished operations, kept for their owners
until retention prunes them, are never read), and since when the longest-waiting
queued operation has been due (the earliest ``not_before`` in the claim's line:
one scheduled for later is not waiting yet). What finished is counted as it
happens (``durable_ops_operations_finished_total``), not read back. Callers
cache the answers (a scrape every few seconds must not become a query per
scrape per replica).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import cast

from sqlalchemy import Table, func, select, union_all

from durable_ops.model.states import ACTIVE_STATES, OperationState
from durable_ops.storage.operations import in_line
from durable_ops.storage.schema import UserOperation
from durable_ops.storage.tx import Tx

OPS = cast(Table, UserOperation.__table__)

# One SELECT per state, not ``state IN (…)``: MariaDB reads an IN list over a table it
# thinks small as a scan of the whole index (finished rows too), an equality always as a
# seek (tests/integration/test_domain_metrics.py counts the reads).
_UNFINISHED_BY_STATE_AND_TYPE = union_all(
    *(
        select(OPS.c.state, OPS.c.task_type, func.count())
        .where(OPS.c.state == state)
        .group_by(OPS.c.state, OPS.c.task_type)
        for state in sorted(state.value for state in ACTIVE_STATES)
    )
)
_OLDEST_QUEUED = select(func.min(OPS.c.not_before)).where(
    OPS.c.state == OperationState.QUEUED.value, in_line()
)


@dataclass(frozen=True)
class OperationCounts:
    unfinished: dict[tuple[str, str], int]  # (state, task type) -> operations
    oldest_queued_at: datetime | None


def operation_counts(tx: Tx) -> OperationCounts:
    """Every owner's unfinished operations by (state, task type), and since when the
    longest-waiting queued one has been due."""
    counts: dict[tuple[str, str], int] = {}
    for row in tx.execute(_UNFINISHED_BY_STATE_AND_TYPE).all():
        state, task_type, count = tuple(row)
        counts[(str(state), str(task_type))] = int(count)
    oldest = tx.execute(_OLDEST_QUEUED).scalar_one_or_none()
    return OperationCounts(counts, oldest)
