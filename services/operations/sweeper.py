"""The lease sweeper: a loop inside the Operations process.

Safe with several replicas at once: a sweep locks the rows it changes and skips
the rows another sweep holds, so two sweepers racing over one row change it once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import structlog

from durable_ops.clock import Clock
from durable_ops.logs import FailureRun
from durable_ops.model.errors import DomainError
from durable_ops.operations.metrics import OperationsMetrics
from durable_ops.storage import operations
from durable_ops.storage.db import Database

log = structlog.get_logger(__name__)


async def sweep_once(db: Database, clock: Clock) -> operations.SweepReport:
    now = clock()
    return await db.run_async(lambda tx: operations.sweep(tx, now), owner_id=None)


def _say(write: Callable[..., object], event: str, **fields: object) -> None:
    # A line the log cannot take (its reader gone, ``logs``) is the log's loss: the sweeper
    # sweeps on at the next tick.
    with contextlib.suppress(Exception):
        write(event, **fields)


async def run_sweeper(
    db: Database,
    clock: Clock,
    interval_seconds: float,
    *,
    metrics: OperationsMetrics | None = None,
) -> None:
    """Sweep until cancelled; a failed sweep is retried on the next tick.

    A run of failed sweeps logs ``sweep_failed`` at its first (with the error's class) and
    ``sweep_recovered`` once a sweep succeeds again (how long and how many failed);
    ``metrics`` counts every pass. A sweep that made work claimable again wakes the claims
    waiting in this process (``Database.events``).
    """
    failing = FailureRun()
    while True:
        more = False
        try:
            report = await sweep_once(db, clock)
        except Exception as exc:  # the sweeper must outlive a database hiccup
            if metrics is not None:
                metrics.swept(None)
            if failing.failed():
                # A domain error's words are the product's own (never a row's): they say what
                # an operator looks for ("the database cannot be reached").
                said = (
                    {"code": exc.code, "reason": exc.message}
                    if isinstance(exc, DomainError)
                    else {}
                )
                _say(log.warning, "sweep_failed", error=type(exc).__name__, **said)
        else:
            more = report.full
            if metrics is not None:
                metrics.swept(report)
            if (run := failing.ended()) is not None:
                _say(log.info, "sweep_recovered", failed_seconds=run[0], failed_sweeps=run[1])
            if report.total > report.aged:  # aging alone changes no state: no line
                _say(
                    log.info,
                    "sweep",
                    expired_leases=report.expired_leases,
                    deadlines=report.deadlines,
                    promoted=report.promoted,
                )
        if not more:  # a full batch: sweep on at once, more may be due
            await asyncio.sleep(interval_seconds)
