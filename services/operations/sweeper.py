"""The lease sweeper: a loop inside the Operations process.

Safe with several replicas at once: a sweep locks the rows it changes and skips
the rows another sweep holds, so two sweepers racing over one row change it once.
"""

from __future__ import annotations

import asyncio
import contextlib

import structlog

from durable_ops.clock import Clock
from durable_ops.model.errors import DomainError
from durable_ops.operations.metrics import OperationsMetrics
from durable_ops.storage import operations
from durable_ops.storage.db import Database

log = structlog.get_logger(__name__)


async def sweep_once(db: Database, clock: Clock) -> operations.SweepReport:
    now = clock()
    return await db.run_async(lambda tx: operations.sweep(tx, now), owner_id=None)


async def run_sweeper(
    db: Database,
    clock: Clock,
    interval_seconds: float,
    *,
    metrics: OperationsMetrics | None = None,
) -> None:
    """Sweep until cancelled; a failed sweep is logged and retried on the next tick.

    A sweep that made work claimable again wakes the claims waiting in this
    process (``Database.events``); ``metrics`` counts every pass.
    """
    while True:
        more = False
        try:
            report = await sweep_once(db, clock)
            more = report.full
            if metrics is not None:
                metrics.swept(report)
            if report.total > report.aged:  # aging alone changes no state: no line
                log.info(
                    "sweep",
                    expired_leases=report.expired_leases,
                    deadlines=report.deadlines,
                    promoted=report.promoted,
                )
        except Exception as exc:  # the sweeper must outlive a database hiccup
            if metrics is not None:
                metrics.swept(None)
            # Nor may its report of one end it: a line the log cannot take (its reader gone,
            # ``logs``) is the log's loss, and the next tick sweeps again.
            with contextlib.suppress(Exception):
                # A domain error's words are the product's own (never a row's): they say
                # what an operator looks for ("the database cannot be reached").
                said: dict[str, str] = {}
                if isinstance(exc, DomainError):
                    said = {"code": exc.code, "reason": exc.message}
                log.warning("sweep_failed", error=type(exc).__name__, **said)
        if not more:  # a full batch: sweep on at once, more may be due
            await asyncio.sleep(interval_seconds)
