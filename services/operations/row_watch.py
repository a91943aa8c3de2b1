"""Wake the calls that wait on an operation, within a fraction of a second.

A call registers the operation it waits on (``watching``), or a changing set of
them (``watching_many``: a lease stream holding many leases). A change
committed on this replica wakes it at once (``wake``); a change committed on
another replica is found by one indexed query for all the operations this
replica's calls wait on, every ``interval_seconds`` and only while any call
waits. Each call is woken once per operation it registered.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from durable_ops.operations.shared_poll import SharedPoll
from durable_ops.storage.db import Database
from durable_ops.storage.tx import Tx

Among = Callable[[Tx, Sequence[str]], set[str]]


class Watch:
    """One call's operations: ``event`` is set when any of them was woken; ``take`` says which."""

    def __init__(self, rows: RowWatch) -> None:
        self._rows = rows
        self.event = asyncio.Event()
        self._ids: set[str] = set()
        self._woken: set[str] = set()  # each operation is woken once while watched
        self._fresh: set[str] = set()  # woken and not taken yet

    def add(self, operation_id: str) -> None:
        if operation_id not in self._ids:
            self._ids.add(operation_id)
            self._rows._register(operation_id, self)

    def discard(self, operation_id: str) -> None:
        if operation_id in self._ids:
            self._ids.discard(operation_id)
            self._woken.discard(operation_id)
            self._fresh.discard(operation_id)
            self._rows._unregister(operation_id, self)

    def woken(self, operation_id: str) -> bool:
        return operation_id in self._woken

    def wake(self, operation_id: str) -> None:
        if operation_id in self._ids and operation_id not in self._woken:
            self._woken.add(operation_id)
            self._fresh.add(operation_id)
            self.event.set()

    def take(self) -> set[str]:
        """The operations woken since the last take; they stay woken (each is woken once)."""
        self.event.clear()
        taken, self._fresh = self._fresh, set()
        return taken

    def close(self) -> None:
        for operation_id in list(self._ids):
            self.discard(operation_id)


class RowWatch:
    def __init__(self, name: str, db: Database, interval_seconds: float, among: Among) -> None:
        self._db = db
        self._among = among
        self._waiting: dict[str, set[Watch]] = {}
        self._poll = SharedPoll(name, interval_seconds, self._find)

    @property
    def polls(self) -> int:
        return self._poll.polls

    @contextmanager
    def watching(self, operation_id: str) -> Iterator[asyncio.Event]:
        """An event set when ``operation_id`` may have reached what this watch looks for."""
        with self.watching_many() as watch:
            watch.add(operation_id)
            yield watch.event

    @contextmanager
    def watching_many(self) -> Iterator[Watch]:
        """A watch of the operations the caller adds to it, and discards, as it goes."""
        watch = Watch(self)
        try:
            yield watch
        finally:
            watch.close()

    def _register(self, operation_id: str, watch: Watch) -> None:
        self._waiting.setdefault(operation_id, set()).add(watch)
        self._poll.ensure_running(lambda: bool(self._waiting))

    def _unregister(self, operation_id: str, watch: Watch) -> None:
        watches = self._waiting.get(operation_id, set())
        watches.discard(watch)
        if not watches:
            self._waiting.pop(operation_id, None)

    def wake(self, operation_id: str) -> None:
        for watch in list(self._waiting.get(operation_id, ())):
            watch.wake(operation_id)

    def _unwoken(self) -> list[str]:
        return [
            operation_id
            for operation_id, watches in self._waiting.items()
            if not all(watch.woken(operation_id) for watch in watches)
        ]

    async def _find(self) -> None:
        ids = self._unwoken()
        if not ids:
            return
        found = await self._db.run_core_async(
            lambda tx: self._among(tx, ids), owner_id=None, write=False
        )
        for operation_id in found:
            self.wake(operation_id)

    async def close(self) -> None:
        await self._poll.close()
