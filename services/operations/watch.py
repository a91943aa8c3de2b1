"""Wake the calls that wait on operations, within a fraction of a second.

A call watches the operations it waits on (one, or the changing set of a
lease stream) for what it waits for (an ``Interest``): the end or a move of
an operation (``WaitOperation``, the HTTP long-poll), or its owner's cancel
(the lease streams). A change committed in this process wakes the calls it
may concern at once (``Database.events``); a change committed elsewhere (on
another replica, by the sweeper) is found by one primary-key query for every
operation this process's calls watch (``storage.operations.versions_among``),
every ``interval_seconds`` (a tick) and only while a call watches one it has
not been woken for; an interest may ask less often (``every_ticks``), on
ticks shared by all its calls, so that many of them still cost one query.
An operation wakes a call once, until the call looks again (``Watch.rearm``).
No call polls alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from datetime import datetime

from durable_ops.model.states import OperationState
from durable_ops.operations.shared_poll import SharedPoll
from durable_ops.storage import operations
from durable_ops.storage.db import Database
from durable_ops.storage.events import Changed, Committed
from durable_ops.storage.operations import Version


@dataclass(frozen=True)
class Interest:
    """What a call waits for: a test of the operation as polled, and of a change committed
    here (which the call reads again when it is not sure); asked of the database every
    ``every_ticks`` ticks of the watch."""

    found: Callable[[Version | None], bool]
    heard: Callable[[Changed], bool]
    every_ticks: int = 1


def answers(
    seen: datetime | None, version: Version | None, began: OperationState | None = None
) -> bool:
    """Whether a waiter has its answer: the operation is done, or its state differs from
    ``began`` (the state it had as the wait began), or its ``updated_at`` from ``seen`` (any
    change the owner sees); ``None`` for either: that does not answer, only the end does.

    A vanished operation answers too: the waiter's read says it is not found.
    """
    if version is None or version.state.is_terminal:
        return True
    if began is not None and version.state is not began:
        return True
    return seen is not None and version.updated_at != seen


def moved(seen: datetime | None, began: Callable[[], OperationState | None]) -> Interest:
    """The end of the operation, or a change from what the caller saw (``answers``); the
    state it began in is known from the waiter's first read, so it is asked each time."""
    return Interest(lambda version: answers(seen, version, began()), lambda change: True)


# Every third tick (0.3 s): a replica's 200 open lease streams cost it about 3 queries a
# second (figure 8: at most 5 statements/s), and a cancel sent through another replica still
# reaches its holder well within figure 8's second.
CANCEL = Interest(
    lambda version: (
        version is not None and version.state is OperationState.RUNNING and version.cancel_requested
    ),
    lambda change: change.cancel_asked,
    every_ticks=3,
)


class Watch:
    """One call's operations: ``event`` is set when any of them was woken; ``take`` says which."""

    def __init__(self, watcher: Watcher, interest: Interest) -> None:
        self._watcher = watcher
        self.interest = interest
        self.event = asyncio.Event()
        self._ids: set[str] = set()
        self._woken: set[str] = set()  # each operation wakes the call once, until rearmed
        self._fresh: set[str] = set()  # woken and not taken yet

    def add(self, operation_id: str) -> None:
        if operation_id not in self._ids:
            self._ids.add(operation_id)
            self._watcher._register(operation_id, self)

    def discard(self, operation_id: str) -> None:
        if operation_id in self._ids:
            self._ids.discard(operation_id)
            self._woken.discard(operation_id)
            self._fresh.discard(operation_id)
            self._watcher._unregister(operation_id, self)

    def woken(self, operation_id: str) -> bool:
        return operation_id in self._woken

    def wake(self, operation_id: str) -> None:
        if operation_id in self._ids and operation_id not in self._woken:
            self._woken.add(operation_id)
            self._fresh.add(operation_id)
            self.event.set()

    def take(self) -> set[str]:
        """The operations woken since the last take; they stay woken."""
        self.event.clear()
        taken, self._fresh = self._fresh, set()
        return taken

    def rearm(self) -> None:
        """The call is about to look again: what changes from now on wakes it anew."""
        self.event.clear()
        self._woken.clear()
        self._fresh.clear()

    def close(self) -> None:
        for operation_id in list(self._ids):
            self.discard(operation_id)


class Watcher(SharedPoll):
    def __init__(self, db: Database, interval_seconds: float) -> None:
        self._watches: dict[str, set[Watch]] = {}
        self.ticks = 0
        super().__init__(db, "operation_watch", interval_seconds)

    @contextmanager
    def watching(self, interest: Interest, *operation_ids: str) -> Iterator[Watch]:
        """A watch for ``interest`` of these operations and those the caller adds."""
        with closing(Watch(self, interest)) as watch:
            for operation_id in operation_ids:
                watch.add(operation_id)
            yield watch

    def _register(self, operation_id: str, watch: Watch) -> None:
        self._watches.setdefault(operation_id, set()).add(watch)
        self._ensure_polling()

    def _unregister(self, operation_id: str, watch: Watch) -> None:
        watches = self._watches.get(operation_id, set())
        watches.discard(watch)
        if not watches:
            self._watches.pop(operation_id, None)

    def _committed(self, changes: Sequence[Committed]) -> None:
        for change in changes:
            if isinstance(change, Changed):
                for watch in list(self._watches.get(change.operation_id, ())):
                    if watch.interest.heard(change):
                        watch.wake(change.operation_id)

    def _waiting(self) -> bool:
        return bool(self._watches)

    async def _poll(self) -> bool:
        self.ticks += 1
        ids = [
            operation_id
            for operation_id, watches in self._watches.items()
            if any(
                not watch.woken(operation_id) and self.ticks % watch.interest.every_ticks == 0
                for watch in watches
            )
        ]
        if not ids:
            return False
        versions = await self._db.run_async(
            lambda tx: operations.versions_among(tx, ids), owner_id=None, write=False
        )
        for operation_id in ids:
            version = versions.get(operation_id)
            for watch in list(self._watches.get(operation_id, ())):
                if watch.interest.found(version):
                    watch.wake(operation_id)
        return True
