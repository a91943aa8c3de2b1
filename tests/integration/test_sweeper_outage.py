"""A database outage is two sweeper lines, not one a second (a 90 s outage wrote 86).

The sweeper of a real Operations process sweeps a MariaDB server of the test's own, which
is stopped under it and started again: one ``sweep_failed`` when sweeping starts failing,
one ``sweep_recovered`` (how long, how many sweeps) when it sweeps again, while the
metrics count every pass as before.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
import structlog.testing
from prometheus_client import CollectorRegistry

from durable_ops.operations.metrics import OperationsMetrics
from durable_ops.operations.sweeper import run_sweeper
from durable_ops.storage import migrate
from durable_ops.storage.db import Database
from tests.support.throwaway_mariadb import throwaway_mariadb

pytestmark = pytest.mark.slow

TICK_SECONDS = 0.05


def test_an_outage_is_one_line_as_it_begins_and_one_as_it_ends() -> None:
    with throwaway_mariadb() as server:
        server.start()
        url = server.create_database("ops")
        migrate.upgrade(url)

        def clock() -> datetime:
            return datetime.now(UTC)

        db = Database(url, pool_size=2)
        registry = CollectorRegistry()
        metrics = OperationsMetrics(registry, db, clock)

        def runs(outcome: str) -> float:
            found = registry.get_sample_value(
                "durable_ops_sweeper_runs_total", {"outcome": outcome}
            )
            return found or 0.0

        async def until(check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
            deadline = time.monotonic() + timeout
            while not check():
                assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f} s"
                await asyncio.sleep(TICK_SECONDS)

        async def scenario() -> None:
            sweeping = asyncio.create_task(run_sweeper(db, clock, TICK_SECONDS, metrics=metrics))
            try:
                await until(lambda: runs("ok") >= 2, "sweeps")
                await asyncio.to_thread(server.stop)
                await until(lambda: runs("failed") >= 10, "ten failed sweeps")
                failed_before_start = runs("failed")
                await asyncio.to_thread(server.start)
                ok_at_start = runs("ok")
                await until(lambda: runs("ok") > ok_at_start + 1, "sweeps again")
            finally:
                sweeping.cancel()
                await asyncio.gather(sweeping, return_exceptions=True)
            assert failed_before_start >= 10

        try:
            with structlog.testing.capture_logs() as lines:
                asyncio.run(scenario())
        finally:
            db.dispose()

    told = [line for line in lines if line["event"] in {"sweep_failed", "sweep_recovered"}]
    assert [line["event"] for line in told] == ["sweep_failed", "sweep_recovered"], told
    failed, recovered = told
    assert failed["log_level"] == "warning"
    assert failed["error"]  # the error's class, e.g. Unavailable
    assert recovered["failed_sweeps"] == runs("failed")  # every failed pass of the outage
    assert recovered["failed_seconds"] > 0
