"""Wake an owner's watches (``WatchOwner``) when any of the owner's operations changes.

A change this process commits names its owner (``storage.events.Changed``)
and wakes that owner's watches at once. What other replicas (and the
sweeper) commit is found by one shared poll for every owner watched here:
each owner's newest ``updated_at`` (``storage.owner_changes.newest_among``),
every ``interval_seconds``, while anyone watches. A woken watch reads what
changed since its own cursor.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime

from durable_ops.operations.shared_poll import SharedPoll
from durable_ops.storage import owner_changes
from durable_ops.storage.db import Database
from durable_ops.storage.events import Changed, Committed


class OwnerWatcher(SharedPoll):
    def __init__(self, db: Database, interval_seconds: float) -> None:
        self._watches: dict[str, set[asyncio.Event]] = {}
        self._newest: dict[str, datetime] = {}  # as the last poll found it
        super().__init__(db, "owner_watch", interval_seconds)

    @contextmanager
    def watching(self, owner: str) -> Iterator[asyncio.Event]:
        """An event set whenever one of ``owner``'s operations may have changed."""
        woken = asyncio.Event()
        self._watches.setdefault(owner, set()).add(woken)
        self._ensure_polling()
        try:
            yield woken
        finally:
            watches = self._watches.get(owner, set())
            watches.discard(woken)
            if not watches:
                self._watches.pop(owner, None)
                self._newest.pop(owner, None)

    def _wake(self, owner: str) -> None:
        for woken in self._watches.get(owner, ()):
            woken.set()

    def _committed(self, changes: Sequence[Committed]) -> None:
        for change in changes:
            if isinstance(change, Changed) and change.owner_id:
                self._wake(change.owner_id)

    def _waiting(self) -> bool:
        return bool(self._watches)

    async def _poll(self) -> bool:
        owners = list(self._watches)
        if not owners:
            return False
        newest = await self._db.run_async(
            lambda tx: owner_changes.newest_among(tx, owners), owner_id=None, write=False
        )
        for owner, at in newest.items():
            if self._newest.get(owner) != at:
                self._newest[owner] = at
                self._wake(owner)
        return True
