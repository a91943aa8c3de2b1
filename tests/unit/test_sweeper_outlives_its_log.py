"""The sweeper's loop outlives a failed sweep whose report the log cannot take."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from durable_ops.operations import sweeper
from durable_ops.storage.db import Database


class _BrokenLog:
    """A logger whose every line fails, as one did on a pipe nobody read any more."""

    def __getattr__(self, _name: str) -> Any:
        def write(*_args: object, **_fields: object) -> None:
            raise BrokenPipeError(32, "Broken pipe")

        return write


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
