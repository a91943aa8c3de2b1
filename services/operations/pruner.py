"""Retention inside the Operations process (ADR 0021): batches of prunes, on demand or periodic.

``prune`` runs batches (``storage.retention.prune_batch``), each in its own
transaction, until one comes back short or a time limit passes; the operator's
``PruneOperations`` uses it with a limit, and the periodic prune
(``OPS_RETENTION_DAYS``) without one, resting between batches so the work it
shares the database with goes first. With retention off the periodic run still
keeps house: stale drafts, old budget days and idle concurrency slots, which are
the product's own bookkeeping, not the owners' history. Safe with several
replicas: a row locked by one batch is skipped by the others, and a row deleted
is deleted once.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import datetime
from functools import partial

import structlog

from durable_ops.clock import Clock
from durable_ops.model.retention import RetentionPolicy
from durable_ops.operations.metrics import OperationsMetrics
from durable_ops.operations.tuning import TUNING
from durable_ops.storage import budgets, drafts, retention
from durable_ops.storage.db import Database
from durable_ops.storage.operations import slots
from durable_ops.storage.tx import OperatorTx, Tx

log = structlog.get_logger(__name__)
# A batch whose DELETE lost a row it had read is rolled back and read again, this often.
RACED_BATCHES_MAX = 3


@dataclass(frozen=True)
class PruneResult:
    pruned: int
    forgotten: int
    more: bool  # stopped at the time limit with a full last batch


def _batch(
    policy: RetentionPolicy | None, now: datetime, limit: int, tx: Tx
) -> tuple[retention.PruneBatch, bool]:
    """One batch, and whether it was full (another may find more)."""
    # Drafts no beat wrote for a day (an operation's end deletes its own draft, so these
    # are few): deleted whatever the horizons, the index on updated_at finds them.
    drafts.prune_stale(tx, now)
    budgets.prune_old_days(tx, now.date())  # likewise few: a row per owner per day used
    idle = slots.prune_idle(tx, limit)  # a row per key that ever ran, back when next needed
    batch = retention.PruneBatch(pruned=0, forgotten=0)
    if policy is not None:
        batch = retention.prune_batch(OperatorTx(tx), policy, now, limit)
    return batch, max(idle, batch.pruned, batch.forgotten) >= limit


async def prune(
    db: Database,
    clock: Clock,
    policy: RetentionPolicy | None,
    batch_size: int,
    *,
    seconds: float | None = None,
    pause_seconds: float = 0.0,
    metrics: OperationsMetrics | None = None,
) -> PruneResult:
    """Batches until one is short (done) or ``seconds`` have passed (``more``)."""
    give_up_at = None if seconds is None else time.monotonic() + seconds
    pruned = forgotten = raced = 0
    while True:
        try:
            batch, full = await db.run_async(
                partial(_batch, policy, clock(), batch_size), owner_id=None
            )
        except retention.PruneRaced:
            raced += 1
            if raced >= RACED_BATCHES_MAX:
                raise
            continue
        pruned += batch.pruned
        forgotten += batch.forgotten
        if metrics is not None:
            metrics.pruned(batch)
        if not full:
            return PruneResult(pruned, forgotten, more=False)
        if give_up_at is not None and time.monotonic() >= give_up_at:
            return PruneResult(pruned, forgotten, more=True)
        await asyncio.sleep(pause_seconds)


async def run_pruner(
    db: Database,
    clock: Clock,
    policy: RetentionPolicy | None,
    batch_size: int,
    *,
    metrics: OperationsMetrics | None = None,
) -> None:
    """Prune everything past the horizons, then every ``Tuning.retention_interval_seconds``,
    until cancelled; a failed run is logged and tried again at the next interval."""
    pause = TUNING.prune_pause_seconds
    while True:
        try:
            result = await prune(
                db, clock, policy, batch_size, pause_seconds=pause, metrics=metrics
            )
            if result.pruned or result.forgotten:
                log.info("retention_pruned", pruned=result.pruned, forgotten=result.forgotten)
        except Exception as exc:  # the pruner must outlive a database hiccup
            log.warning("retention_prune_failed", error=type(exc).__name__)
        await asyncio.sleep(TUNING.retention_interval_seconds)
