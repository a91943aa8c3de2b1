"""Wake the calls that wait on an operation, within a fraction of a second.

A call registers the operation it waits on. A change committed on this
replica wakes it at once (``wake``); a change committed on another replica is
found by one indexed query for all the operations this replica's calls wait
on, every ``interval_seconds`` and only while any call waits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from durable_ops.operations.shared_poll import SharedPoll
from durable_ops.storage.db import Database
from durable_ops.storage.tx import Tx

Among = Callable[[Tx, Sequence[str]], set[str]]


class RowWatch:
    def __init__(self, name: str, db: Database, interval_seconds: float, among: Among) -> None:
        self._db = db
        self._among = among
        self._waiting: dict[str, set[asyncio.Event]] = {}
        self._poll = SharedPoll(name, interval_seconds, self._find)

    @property
    def polls(self) -> int:
        return self._poll.polls

    @contextmanager
    def watching(self, operation_id: str) -> Iterator[asyncio.Event]:
        """An event set when ``operation_id`` may have reached what this watch looks for."""
        event = asyncio.Event()
        self._waiting.setdefault(operation_id, set()).add(event)
        self._poll.ensure_running(lambda: bool(self._waiting))
        try:
            yield event
        finally:
            events = self._waiting.get(operation_id, set())
            events.discard(event)
            if not events:
                self._waiting.pop(operation_id, None)

    def wake(self, operation_id: str) -> None:
        for event in self._waiting.get(operation_id, ()):
            event.set()

    def _unwoken(self) -> list[str]:
        return [
            operation_id
            for operation_id, events in self._waiting.items()
            if not all(event.is_set() for event in events)
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
