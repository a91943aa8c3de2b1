"""Wake the calls that wait on operations, or on an owner's, within a fraction of a second.

A call watches keys (the operation it waits on, the changing set of a lease
stream's, or an owner whose operations it streams) for what it waits for (an
``Interest``): the end or a move of an operation (``WaitOperation``, the HTTP
long-poll), its owner's cancel (the lease streams), any change of an owner's
(``WatchOwner``). A change committed in this process wakes the calls it may
concern at once (``Database.events``); a change committed elsewhere (on
another replica, by the sweeper) is found by one query for every key this
process's calls watch (``storage.operations.versions_among``, one primary-key
query; ``storage.owner_changes.newest_among``, each owner's newest
``updated_at``), every ``interval_seconds`` (a tick) and only while a call
watches one it has not been woken for; an interest may ask less often
(``every_ticks``), on ticks shared by all its calls, so that many of them still
cost one query. A key wakes a call once, until the call looks again
(``Watch.rearm``). No call polls alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, TypeVar

from durable_ops.model.states import OperationState
from durable_ops.operations.shared_poll import SharedPoll
from durable_ops.storage.db import Database
from durable_ops.storage.events import Changed, Committed
from durable_ops.storage.operations import Version
from durable_ops.storage.tx import Tx

Found = TypeVar("Found")  # what the poll finds of one key: a Version, an owner's newest change


@dataclass(frozen=True)
class Interest(Generic[Found]):
    """What a call waits for: a test of its key as polled, and of a change committed here
    (which the call reads again when it is not sure); asked of the database every
    ``every_ticks`` ticks of the watch."""

    found: Callable[[Found | None], bool]
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


def moved(seen: datetime | None, began: Callable[[], OperationState | None]) -> Interest[Version]:
    """The end of the operation, or a change from what the caller saw (``answers``); the
    state it began in is known from the waiter's first read, so it is asked each time."""
    return Interest(lambda version: answers(seen, version, began()), lambda change: True)


# Every third tick (0.3 s): a replica's 200 open lease streams cost it about 3 queries a
# second (figure 8: at most 5 statements/s), and a cancel sent through another replica still
# reaches its holder well within figure 8's second.
CANCEL: Interest[Version] = Interest(
    lambda version: (
        version is not None and version.state is OperationState.RUNNING and version.cancel_requested
    ),
    lambda change: change.cancel_asked,
    every_ticks=3,
)


def owner_moved() -> Interest[datetime]:
    """Any change of the owner's operations: committed here, or an owner's newest change
    other than the last poll found (the first poll wakes the call: it may have missed one)."""
    last: datetime | None = None

    def found(newest: datetime | None) -> bool:
        nonlocal last
        differs, last = newest != last, newest
        return differs

    return Interest(found, lambda change: True)


class Watch(Generic[Found]):
    """One call's keys: ``event`` is set when any of them was woken; ``take`` says which."""

    def __init__(self, watcher: Watcher[Found], interest: Interest[Found]) -> None:
        self._watcher = watcher
        self.interest = interest
        self.event = asyncio.Event()
        self._ids: set[str] = set()
        self._woken: set[str] = set()  # each key wakes the call once, until rearmed
        self._fresh: set[str] = set()  # woken and not taken yet

    def add(self, key: str) -> None:
        if key not in self._ids:
            self._ids.add(key)
            self._watcher._register(key, self)

    def discard(self, key: str) -> None:
        if key in self._ids:
            self._ids.discard(key)
            self._woken.discard(key)
            self._fresh.discard(key)
            self._watcher._unregister(key, self)

    def woken(self, key: str) -> bool:
        return key in self._woken

    def wake(self, key: str) -> None:
        if key in self._ids and key not in self._woken:
            self._woken.add(key)
            self._fresh.add(key)
            self.event.set()

    def take(self) -> set[str]:
        """The keys woken since the last take; they stay woken."""
        self.event.clear()
        taken, self._fresh = self._fresh, set()
        return taken

    def rearm(self) -> None:
        """The call is about to look again: what changes from now on wakes it anew."""
        self.event.clear()
        self._woken.clear()
        self._fresh.clear()

    def close(self) -> None:
        for key in list(self._ids):
            self.discard(key)


class Watcher(SharedPoll, Generic[Found]):
    """The watches of one kind of key: ``key`` names a change's, ``ask`` polls for many."""

    def __init__(
        self,
        db: Database,
        name: str,
        interval_seconds: float,
        key: Callable[[Changed], str],
        ask: Callable[[Tx, list[str]], Mapping[str, Found]],
    ) -> None:
        self._key = key
        self._ask = ask
        self._watches: dict[str, set[Watch[Found]]] = {}
        self.ticks = 0
        super().__init__(db, name, interval_seconds)

    @contextmanager
    def watching(self, interest: Interest[Found], *keys: str) -> Iterator[Watch[Found]]:
        """A watch for ``interest`` of these keys and those the caller adds."""
        with closing(Watch(self, interest)) as watch:
            for key in keys:
                watch.add(key)
            yield watch

    def _register(self, key: str, watch: Watch[Found]) -> None:
        self._watches.setdefault(key, set()).add(watch)
        self._ensure_polling()

    def _unregister(self, key: str, watch: Watch[Found]) -> None:
        watches = self._watches.get(key, set())
        watches.discard(watch)
        if not watches:
            self._watches.pop(key, None)

    def _committed(self, changes: Sequence[Committed]) -> None:
        for change in changes:
            if isinstance(change, Changed):
                key = self._key(change)
                for watch in list(self._watches.get(key, ())):
                    if watch.interest.heard(change):
                        watch.wake(key)

    def _waiting(self) -> bool:
        return bool(self._watches)

    async def _poll(self) -> bool:
        self.ticks += 1
        keys = [
            key
            for key, watches in self._watches.items()
            if any(
                not watch.woken(key) and self.ticks % watch.interest.every_ticks == 0
                for watch in watches
            )
        ]
        if not keys:
            return False
        found = await self._db.run_async(lambda tx: self._ask(tx, keys), owner_id=None, write=False)
        for key in keys:
            for watch in list(self._watches.get(key, ())):
                if watch.interest.found(found.get(key)):
                    watch.wake(key)
        return True
