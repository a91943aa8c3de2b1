"""What a replica's waiting calls have in common: woken by its own commits, else by one poll.

The claim waiters and the watches each hear what this process commits
(``Database.events``) at once, and ask the database one question on behalf of
all their waiters for what other processes commit, at a short interval and
only while any waits: the cost is a query per interval per replica, whatever
the number of open streams or waiting claims. A failed poll is logged once and
tried again on the next tick.

A question can grow slow: the operation watch's with the operations it watches, the
claim poll's with a backlog of a kind it waits for that no claim may take yet
(a key whose concurrency slot is full, ADR 0048, is read and passed over).
Before ADR 0051 the claim poll read every claimable row of every type: 24 ms
at 10,000 rows and 115 ms at 50,000 on MariaDB here. A poll therefore rests
at least ``REST_PER_POLL_SECOND`` times as long as it took, so it holds the
database at most a fifth of the time whatever the backlog; what it finds is
picked up later by as much (figure 8's create-to-claimed p50, 50 ms at most,
is met while a poll takes under 12 ms).
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence

import structlog

from durable_ops.storage.db import Database
from durable_ops.storage.events import Committed

_log = structlog.get_logger(__name__)
REST_PER_POLL_SECOND = 4.0


def rest_after(interval: float, took: float) -> float:
    """How long to wait before the next poll, after one that took ``took`` seconds."""
    return max(interval, REST_PER_POLL_SECOND * took)


class SharedPoll(ABC):
    def __init__(self, db: Database, name: str, interval_seconds: float) -> None:
        self._db = db
        self._name = name
        self._interval = interval_seconds
        self._task: asyncio.Task[None] | None = None
        self._failing = False
        self.polls = 0
        db.events.subscribe(self._committed)

    @abstractmethod
    def _committed(self, changes: Sequence[Committed]) -> None:
        """What this process committed: wake the waiters it concerns."""

    @abstractmethod
    def _waiting(self) -> bool:
        """Whether any call waits: the poll stops by itself once none does."""

    @abstractmethod
    async def _poll(self) -> bool:
        """Ask the database once for every waiter due, and wake those it answers; whether
        it asked (``polls`` counts the queries)."""

    def _ensure_polling(self) -> None:
        if self._task is None or self._task.done():
            # An empty context: the loop serves every waiter, so it is no part of the call
            # that happened to start it (nor of its trace, which would grow for ever); only
            # the service's name stays, which its log lines carry (``serving._named``).
            context = contextvars.Context()
            process = structlog.contextvars.get_contextvars().get("process")
            if process is not None:
                context.run(structlog.contextvars.bind_contextvars, process=process)
            self._task = asyncio.get_running_loop().create_task(self._run(), context=context)

    async def _run(self) -> None:
        rest = self._interval
        while True:
            await asyncio.sleep(rest)
            if not self._waiting():
                return
            began = time.monotonic()
            try:
                asked = await self._poll()
            except Exception as exc:  # the next tick tries again; the lease/claim outlives it
                if not self._failing:
                    _log.warning("poll_failing", poll=self._name, error=type(exc).__name__)
                self._failing = True
                continue
            finally:
                rest = rest_after(self._interval, time.monotonic() - began)
            self.polls += asked
            # Recovered once the database answered: a poll that found nobody due asked
            # nothing, and said nothing of the database.
            if self._failing and asked:
                _log.info("poll_recovered", poll=self._name)
                self._failing = False

    async def close(self) -> None:
        self._db.events.unsubscribe(self._committed)
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
