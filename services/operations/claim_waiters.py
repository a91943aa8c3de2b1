"""Claims that wait for work: woken at once by a create here, else by one shared poll.

A waiting claim names the kinds of operation it can take: (the state a claim
takes from, task type). Work that becomes claimable on this replica (a create,
a retry, a fallback request, a sweep) wakes the claims that can take it at
once; work that appears through another replica is found by one indexed query
for every waiting claim of the replica, every ``interval_seconds``. A woken
claim tries to claim; if another took the row first, it waits again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

from durable_ops.clock import Clock
from durable_ops.operations.shared_poll import SharedPoll
from durable_ops.storage import operations
from durable_ops.storage.db import Database

Kind = tuple[str, str]  # (state a claim takes from, task type)


class _Waiter:
    def __init__(self, kinds: frozenset[Kind]) -> None:
        self.kinds = kinds
        self.woken = asyncio.Event()


class ClaimWaiters:
    def __init__(self, db: Database, clock: Clock, interval_seconds: float) -> None:
        self._db = db
        self._clock = clock
        self._waiters: set[_Waiter] = set()
        self._poll = SharedPoll("claim_poll", interval_seconds, self._find_work)

    @property
    def waiting_count(self) -> int:
        return len(self._waiters)

    @contextmanager
    def waiting(self, kinds: frozenset[Kind]) -> Iterator[asyncio.Event]:
        """An event set whenever work of one of ``kinds`` may have become claimable.

        Register before trying to claim, then clear the event before each try:
        work that arrives during a try is not missed.
        """
        waiter = _Waiter(kinds)
        self._waiters.add(waiter)
        self._poll.ensure_running(lambda: bool(self._waiters))
        try:
            yield waiter.woken
        finally:
            self._waiters.discard(waiter)

    def arrived(self, state: str, task_type: str) -> None:
        """Work of this kind became claimable through this replica."""
        self._wake({(state, task_type)})

    def arrived_any(self) -> None:
        """Something became claimable, kind unknown (the sweeper requeued work)."""
        for waiter in self._waiters:
            waiter.woken.set()

    def _wake(self, kinds: set[Kind]) -> None:
        for waiter in self._waiters:
            if waiter.kinds & kinds:
                waiter.woken.set()

    async def _find_work(self) -> None:
        if not any(not waiter.woken.is_set() for waiter in self._waiters):
            return
        now = self._clock()
        found = await self._db.run_core_async(
            lambda tx: operations.claimable_kinds(tx, now), owner_id=None, write=False
        )
        self._wake(found)

    async def close(self) -> None:
        await self._poll.close()
