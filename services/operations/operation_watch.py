"""Wake the calls that wait on an operation: until it is done, or until it moves.

A call registers the operation it waits on and, optionally, the ``updated_at``
it last saw. Every change this replica commits wakes the operation's waiters
at once (``Database.events``: they read the row again and wait on if it is not what
they wait for); a change committed through another replica, or by the
sweeper, is found by one primary-key query for all the operations this
replica's calls wait on (``storage.operations.versions_among``), every
``interval_seconds`` and only while any call waits. No waiter polls alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime

from durable_ops.operations.shared_poll import SharedPoll
from durable_ops.storage import operations
from durable_ops.storage.db import Database
from durable_ops.storage.events import Changed, Committed
from durable_ops.storage.operations import Version


def answers(seen: datetime | None, version: Version | None) -> bool:
    """Whether a waiter that saw ``seen`` (``None``: it waits for the end) has its answer.

    A vanished operation answers too: the waiter's read says it is not found.
    """
    if version is None or version.state.is_terminal:
        return True
    return seen is not None and version.updated_at != seen


class OperationWatch:
    def __init__(self, db: Database, interval_seconds: float) -> None:
        self._db = db
        self._waiting: dict[str, dict[asyncio.Event, datetime | None]] = {}
        self._poll = SharedPoll("operation_watch", interval_seconds, self._find)
        db.events.subscribe(self._committed)

    @property
    def polls(self) -> int:
        return self._poll.polls

    @contextmanager
    def watching(self, operation_id: str, seen: datetime | None = None) -> Iterator[asyncio.Event]:
        """An event set when ``operation_id`` may be done, or differ from ``seen``."""
        event = asyncio.Event()
        self._waiting.setdefault(operation_id, {})[event] = seen
        self._poll.ensure_running(lambda: bool(self._waiting))
        try:
            yield event
        finally:
            events = self._waiting.get(operation_id, {})
            events.pop(event, None)
            if not events:
                self._waiting.pop(operation_id, None)

    def _committed(self, changes: Sequence[Committed]) -> None:
        for change in changes:
            if isinstance(change, Changed):
                for event in self._waiting.get(change.operation_id, {}):
                    event.set()

    async def _find(self) -> None:
        ids = [
            operation_id
            for operation_id, events in self._waiting.items()
            if not all(event.is_set() for event in events)
        ]
        if not ids:
            return
        versions = await self._db.run_core_async(
            lambda tx: operations.versions_among(tx, ids), owner_id=None, write=False
        )
        for operation_id in ids:
            version = versions.get(operation_id)
            for event, seen in self._waiting.get(operation_id, {}).items():
                if answers(seen, version):
                    event.set()

    async def close(self) -> None:
        self._db.events.unsubscribe(self._committed)
        await self._poll.close()
