"""One database poll shared by every waiter of a replica, running only while any waits.

The cancel watch and the waiting claims each ask the database one question on
behalf of all their waiters, at a short interval: the cost is a query per
interval per replica, whatever the number of open streams or waiting claims.
A failed poll is logged once and tried again on the next tick.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable

import structlog

_log = structlog.get_logger(__name__)


class SharedPoll:
    def __init__(
        self, name: str, interval_seconds: float, poll: Callable[[], Awaitable[None]]
    ) -> None:
        if interval_seconds <= 0:
            raise ValueError(f"{name}: the poll interval must be positive")
        self._name = name
        self._interval = interval_seconds
        self._poll = poll
        self._task: asyncio.Task[None] | None = None
        self._failing = False
        self.polls = 0

    def ensure_running(self, waiting: Callable[[], bool]) -> None:
        """Start the loop unless it runs; it stops by itself once ``waiting()`` is false."""
        if self._task is None or self._task.done():
            # An empty context: the loop serves every waiter, so it is no part of the call
            # that happened to start it (nor of its trace, which would grow for ever).
            self._task = asyncio.get_running_loop().create_task(
                self._run(waiting), context=contextvars.Context()
            )

    async def _run(self, waiting: Callable[[], bool]) -> None:
        while True:
            await asyncio.sleep(self._interval)
            if not waiting():
                return
            try:
                await self._poll()
            except Exception as exc:  # the next tick tries again; the lease/claim outlives it
                if not self._failing:
                    _log.warning("poll_failing", poll=self._name, error=type(exc).__name__)
                self._failing = True
                continue
            self.polls += 1
            if self._failing:
                _log.info("poll_recovered", poll=self._name)
                self._failing = False

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
