"""Tell open heartbeat streams, within a fraction of a second, that their owner cancelled.

A stream registers the operation its lease is for. A cancel committed on this
replica wakes the stream at once (``cancelled``); a cancel committed on
another replica is found by one indexed query for all the leases this
replica's streams hold, every ``interval_seconds``. Each stream is woken once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

from durable_ops.operations.shared_poll import SharedPoll
from durable_ops.storage import operations
from durable_ops.storage.db import Database


class CancelWatch:
    def __init__(self, db: Database, interval_seconds: float) -> None:
        self._db = db
        self._streams: dict[str, set[asyncio.Event]] = {}
        self._poll = SharedPoll("cancel_watch", interval_seconds, self._find_cancels)

    @property
    def polls(self) -> int:
        return self._poll.polls

    @contextmanager
    def watching(self, operation_id: str) -> Iterator[asyncio.Event]:
        """An event set once the owner's cancel of ``operation_id`` is committed."""
        event = asyncio.Event()
        self._streams.setdefault(operation_id, set()).add(event)
        self._poll.ensure_running(self._watching)
        try:
            yield event
        finally:
            events = self._streams.get(operation_id, set())
            events.discard(event)
            if not events:
                self._streams.pop(operation_id, None)

    def cancelled(self, operation_id: str) -> None:
        for event in self._streams.get(operation_id, ()):
            event.set()

    def _unwoken(self) -> list[str]:
        return [
            operation_id
            for operation_id, events in self._streams.items()
            if not all(event.is_set() for event in events)
        ]

    def _watching(self) -> bool:
        return bool(self._streams)

    async def _find_cancels(self) -> None:
        ids = self._unwoken()
        if not ids:
            return
        found = await self._db.run_core_async(
            lambda tx: operations.cancels_among(tx, ids), owner_id=None, write=False
        )
        for operation_id in found:
            self.cancelled(operation_id)

    async def close(self) -> None:
        await self._poll.close()
