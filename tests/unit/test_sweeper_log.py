"""The sweeper's lines: one for a sweep that changed a state, none for one that only aged
waiting operations, and a loop that outlives a failed sweep whose report the log cannot
take and sweeps again at once after a full batch."""

from __future__ import annotations

import asyncio
from collections.abc import MutableMapping
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
import structlog.testing

from durable_ops.model.errors import Unavailable
from durable_ops.operations import sweeper
from durable_ops.storage.db import Database
from durable_ops.storage.operations import SweepReport
from durable_ops.storage.operations.rows import ROWS_MAX


class _BrokenLog:
    """A logger whose every line fails, as one did on a pipe nobody read any more."""

    def __getattr__(self, _name: str) -> Any:
        def write(*_args: object, **_fields: object) -> None:
            raise BrokenPipeError(32, "Broken pipe")

        return write


def _lines_of_a_sweeper_run(seconds: float) -> list[MutableMapping[str, Any]]:
    """What the sweeper logs, ticking every 10 ms for ``seconds``, on no database."""

    async def run() -> None:
        loop = asyncio.create_task(
            sweeper.run_sweeper(None, lambda: datetime.now(UTC), 0.01)  # type: ignore[arg-type]
        )
        await asyncio.sleep(seconds)
        loop.cancel()

    with structlog.testing.capture_logs() as lines:
        asyncio.run(run())
    return lines


def test_a_failed_sweep_whose_warning_cannot_be_written_is_retried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tries = 0

    async def failing(_db: Database, _clock: object) -> None:
        nonlocal tries
        tries += 1
        raise ConnectionError("the database hiccuped")

    monkeypatch.setattr(sweeper, "sweep_once", failing)
    monkeypatch.setattr(sweeper, "log", _BrokenLog())

    async def run() -> bool:
        loop = asyncio.create_task(
            sweeper.run_sweeper(None, lambda: datetime.now(UTC), 0.01)  # type: ignore[arg-type]
        )
        while tries < 3 and not loop.done():
            await asyncio.sleep(0.01)
        alive = not loop.done()
        loop.cancel()
        return alive

    assert asyncio.run(run())
    assert tries >= 3


def test_a_sweep_the_database_failed_says_so_in_its_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """An outage logged only ``sweep_failed error=Unavailable`` a second: nothing said it
    was the database (nothing logs ``database_unreachable`` unless health is asked)."""

    async def unreachable(_db: Database, _clock: object) -> None:
        raise Unavailable("the database cannot be reached; try again", code="database_unavailable")

    monkeypatch.setattr(sweeper, "sweep_once", unreachable)
    lines = _lines_of_a_sweeper_run(0.05)
    failed = [line for line in lines if line["event"] == "sweep_failed"]
    assert failed
    assert failed[0]["code"] == "database_unavailable"
    assert failed[0]["reason"] == "the database cannot be reached; try again"


def test_a_sweep_that_only_aged_waiting_operations_writes_no_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under a backlog of mixed priorities aging raises some waiting operation's priority
    nearly every second: a soak logged 137 ``sweep`` lines, every counter in them 0."""
    reports = iter([SweepReport(aged=3), SweepReport(aged=2, expired_leases=1)])

    async def sweeping(_db: Database, _clock: object) -> SweepReport:
        return next(reports, SweepReport())

    monkeypatch.setattr(sweeper, "sweep_once", sweeping)
    swept = [line for line in _lines_of_a_sweeper_run(0.1) if line["event"] == "sweep"]
    assert [line["expired_leases"] for line in swept] == [1]


def test_a_full_batch_of_any_kind_is_swept_again_before_the_sweeper_rests(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A sweep takes at most ``ROWS_MAX`` rows of each kind: a batch that filled may have
    left more due now, and waiting a tick for them delays each by another tick."""
    reports = [
        SweepReport(expired_leases=ROWS_MAX),
        SweepReport(deadlines=ROWS_MAX),
        SweepReport(promoted=ROWS_MAX, let_in=ROWS_MAX),
        SweepReport(expired_leases=ROWS_MAX - 1, deadlines=ROWS_MAX - 1, promoted=ROWS_MAX),
        SweepReport(let_in=ROWS_MAX - 1, promoted=ROWS_MAX - 1, aged=ROWS_MAX),
    ]
    sweeps = 0
    rested_after: list[int] = []  # how many sweeps had run at each rest

    async def sweeping(_db: Database, _clock: object) -> SweepReport:
        nonlocal sweeps
        if sweeps == len(reports):
            raise asyncio.CancelledError  # a loop that never rests ends here
        sweeps += 1
        return reports[sweeps - 1]

    async def rest(_seconds: float) -> None:
        rested_after.append(sweeps)
        if sweeps == len(reports):
            raise asyncio.CancelledError  # the test's end: as a stopping process cancels

    monkeypatch.setattr(sweeper, "sweep_once", sweeping)
    monkeypatch.setattr(sweeper, "asyncio", SimpleNamespace(sleep=rest))
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(sweeper.run_sweeper(None, lambda: datetime.now(UTC), 1.0))  # type: ignore[arg-type]
    assert rested_after == [4, 5]
