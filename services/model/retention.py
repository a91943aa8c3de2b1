"""Retention of finished operations (ADR 0021): horizons, batches, the answer to a pruned key. Pure.

A terminal operation is kept ``operations`` long after it finished; then its
row (and its attempts) is deleted and a tombstone keeps its idempotency key,
request fingerprint, final state and finish time, so a create that repeats the
key is refused instead of running the work again. A tombstone is kept
``tombstones`` long after the operation finished, which is never shorter than
the operation's own horizon; past it, the key may be used again.

Both horizons count from ``finished_at``, so one clock decides both.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from durable_ops.model import bounds
from durable_ops.model.errors import Conflict, InvalidArgument

# Rows deleted per transaction: a prune holds few locks for a short time, and a
# Galera write set stays small.
PRUNE_BATCH = 500
PRUNE_BATCH_MAX = 5000
# How long one PruneOperations call keeps deleting before it answers "more".
PRUNE_CALL_SECONDS = 5.0
# The stable code of the create refused because its key belongs to a pruned operation.
OPERATION_PRUNED = "operation_pruned"


@dataclass(frozen=True)
class RetentionPolicy:
    """How long a finished operation, and then its key, is kept."""

    operations: timedelta
    tombstones: timedelta

    def validated(self) -> RetentionPolicy:
        ages = (("older_than", self.operations), ("tombstones_older_than", self.tombstones))
        for name, age in ages:
            if not timedelta(0) < age <= bounds.OLDER_THAN_MAX:
                raise InvalidArgument(
                    name, f"must be more than 0 and at most {bounds.OLDER_THAN_MAX.days} days"
                )
        if self.tombstones < self.operations:
            raise InvalidArgument(
                "tombstones_older_than",
                "must not be shorter than older_than: a key must outlive its operation's record",
            )
        return self

    def operations_finished_before(self, now: datetime) -> datetime:
        return now - self.operations

    def tombstones_finished_before(self, now: datetime) -> datetime:
        return now - self.tombstones


def policy_of_days(operations_days: int, tombstone_days: int) -> RetentionPolicy:
    """The periodic prune's policy (``OPS_RETENTION_DAYS``, ``OPS_TOMBSTONE_RETENTION_DAYS``)."""
    return RetentionPolicy(
        timedelta(days=operations_days), timedelta(days=tombstone_days)
    ).validated()


def batch_size(requested: int) -> int:
    """0 means the default; anything else must be 1 to ``PRUNE_BATCH_MAX``."""
    if requested == 0:
        return PRUNE_BATCH
    return bounds.int_range("batch_size", requested, (1, PRUNE_BATCH_MAX))


def pruned(state: str, finished_at: datetime) -> Conflict:
    """What a create hears when its key belongs to an operation whose record was removed."""
    day = finished_at.date().isoformat()
    return Conflict(
        f"This request finished on {day} ({state}) and its record was removed;"
        " it is not run again. Use a new idempotency key to run it again.",
        code=OPERATION_PRUNED,
    )
