"""Claims that wait for work: woken by a create here, else by one shared poll.

A waiting claim names the kinds of operation it can take: (the state a claim
takes from, task type), and how many it can take at once. Work that becomes
claimable through this process (a create, a retry, a fallback: ``Database.events``)
is dealt to one waiting claim,
not all of them: a claim already woken (or new, not yet tried) takes further
arrivals up to its capacity, else the claim that has waited longest is woken.
Waking every claim for each create made all but one of them run an empty claim
transaction, which cost more than the claim that won (ADR 0024).

What the shared poll finds (work that appeared through another replica) wakes
one claim per kind found, as an arrival does; a claim that fills its batch may
have left more, and wakes one more claim of its kinds, so a backlog is taken
batch after batch without a claim woken for nothing. Work whose kind is
unknown (a sweep's requeue) wakes every claim. A woken
claim tries to claim; if another took the row first, it waits again. A claim
that leaves with arrivals dealt to it and not yet tried passes them on, so
none is left for the poll to find.

Claims take turns (``turn``): one claim transaction at a time on a replica,
so what arrives during one is there for the next, which takes it as a batch,
and two claims of a replica never race for the same rows (the loser's
transaction would find nothing). Fewer, fuller claim transactions are what
figure 1 (lifecycles/s through gRPC against raw SQL) is made of (ADR 0024).
The only gather window is the worker SDK's (ADR 0034): the server claims as
soon as a claim's turn comes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from durable_ops.clock import Clock
from durable_ops.model import lifecycle
from durable_ops.operations.shared_poll import SharedPoll
from durable_ops.storage import operations
from durable_ops.storage.db import Database
from durable_ops.storage.events import Committed, Requeued

Kind = tuple[str, str]  # (state a claim takes from, task type)
CLAIMABLE = frozenset(move.source for move in lifecycle.CLAIMS.values())


class ClaimWaiter:
    """One waiting claim. ``trying()`` before each claim transaction, ``wait()`` between."""

    def __init__(self, kinds: frozenset[Kind], capacity: int) -> None:
        self.kinds = kinds
        self.capacity = capacity
        self._woken = asyncio.Event()
        # A new claim is about to try (perhaps after waiting for its turn): what arrives
        # until then is its own, instead of waking a waiting claim that would find nothing.
        self._woken.set()
        self._waiting = False
        self._dealt: list[Kind] = []  # arrivals dealt to this claim since its last try

    def trying(self) -> None:
        """About to claim: what arrives from here on needs another try."""
        self._woken.clear()
        self._dealt.clear()

    async def wait(self, timeout: float) -> bool:
        """Until woken (``True``) or ``timeout`` seconds pass (``False``)."""
        self._waiting = True
        try:
            async with asyncio.timeout(timeout):
                await self._woken.wait()
            return True
        except TimeoutError:
            return False
        finally:
            self._waiting = False

    def _has_room(self) -> bool:
        return self._woken.is_set() and len(self._dealt) < self.capacity

    def _deal(self, kind: Kind) -> None:
        self._dealt.append(kind)
        self._woken.set()


class ClaimWaiters(SharedPoll):
    def __init__(self, db: Database, clock: Clock, interval_seconds: float) -> None:
        self._clock = clock
        self._waiters: dict[ClaimWaiter, None] = {}  # ordered: the longest waiting first
        self._turn = asyncio.Lock()
        super().__init__(db, "claim_poll", interval_seconds)

    def turn(self) -> asyncio.Lock:
        """Held around each claim transaction of this replica, not around its wait."""
        return self._turn

    def took(self, waiter: ClaimWaiter, count: int) -> None:
        """The current turn's claim (``waiter``) took ``count`` operations. A full batch may
        have left work behind, so it wakes one more claim of its kinds."""
        if count == waiter.capacity:
            for kind in waiter.kinds:
                self._deal_one(kind, besides=waiter)

    @property
    def waiting_count(self) -> int:
        return len(self._waiters)

    @contextmanager
    def waiting(self, kinds: frozenset[Kind], capacity: int = 1) -> Iterator[ClaimWaiter]:
        """A claim of up to ``capacity`` operations of ``kinds``, registered for wake-ups.

        Register before trying to claim, and call ``trying()`` before each try:
        work that arrives during a try is not missed.
        """
        waiter = ClaimWaiter(kinds, capacity)
        self._waiters[waiter] = None
        self._ensure_polling()
        try:
            yield waiter
        finally:
            del self._waiters[waiter]
            for kind in waiter._dealt:  # woken but gone before trying: another claim takes it
                self.arrived(*kind)

    def arrived(self, state: str, task_type: str) -> None:
        """One operation of this kind became claimable through this replica."""
        self._deal_one((state, task_type))

    def _deal_one(self, kind: Kind, besides: ClaimWaiter | None = None) -> None:
        able = [
            waiter for waiter in self._waiters if kind in waiter.kinds and waiter is not besides
        ]
        chosen = (
            next((waiter for waiter in able if waiter._has_room()), None)
            or next((waiter for waiter in able if waiter._waiting), None)
            or next((waiter for waiter in able if not waiter._woken.is_set()), None)
        )
        if chosen is not None:
            chosen._deal(kind)

    def arrived_any(self) -> None:
        """Something became claimable, kind and amount unknown (the sweeper requeued work)."""
        for waiter in self._waiters:
            waiter._woken.set()

    def _waiting(self) -> bool:
        return bool(self._waiters)

    async def _poll(self) -> bool:
        # Only a claim that found nothing and waits needs the poll: one about to try (or
        # trying) will see what is there, and a poll asked while claims drain a backlog
        # would only slow the drain.
        idle = [w for w in self._waiters if w._waiting and not w._woken.is_set()]
        if not idle:
            return False
        now = self._clock()
        kinds = frozenset().union(*(waiter.kinds for waiter in idle))
        found = await self._db.run_async(
            lambda tx: operations.claimable_kinds(tx, now, kinds), owner_id=None, write=False
        )
        for kind in found:  # one claim each: a full batch wakes the next (``took``)
            self._deal_one(kind)
        return True

    def _committed(self, changes: Sequence[Committed]) -> None:
        for change in changes:
            if isinstance(change, Requeued):
                self.arrived_any()
            elif change.state in CLAIMABLE and not change.scheduled:
                self.arrived(change.state, change.task_type)
