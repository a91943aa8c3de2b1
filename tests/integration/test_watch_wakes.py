"""Who the watches (``operations.watch``) wake, and what their shared poll asks.

A change this process commits wakes the calls it concerns at once, before any poll: the
poll rests an hour here (it runs only where a test calls it), and each check is made
right after the delivery, with nothing awaited in between. A key wakes a call once until
the call looks again, and the poll asks only for keys not woken, on the ticks their
interest asks for. The poll's question is the real one, on a migrated SQLite database.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from functools import partial

import pytest

from durable_ops.clock import utc_now
from durable_ops.model.states import OperationState
from durable_ops.operations.app import OperationsApp
from durable_ops.operations.tuning import TUNING
from durable_ops.operations.watch import CANCEL, Watcher, moved, owner_moved
from durable_ops.storage import operations
from durable_ops.storage.db import Database
from durable_ops.storage.events import Changed
from durable_ops.storage.operations import Version
from durable_ops.storage.schema import UserOperation
from durable_ops.storage.tx import Tx

RUNNING = OperationState.RUNNING
AN_HOUR = 3600.0


@pytest.fixture
def db(sqlite_db: Database) -> Database:
    return sqlite_db


class Asked:
    """The poll's real question, and the keys of each time it was asked."""

    def __init__(self) -> None:
        self.keys: list[list[str]] = []

    def __call__(self, tx: Tx, keys: list[str]) -> dict[str, Version]:
        self.keys.append(sorted(keys))
        return operations.versions_among(tx, keys)


def _create(tx: Tx, request: operations.CreateRequest) -> tuple[UserOperation, bool]:
    return operations.create(tx, request, utc_now())


def _queued(db: Database, *keys: str) -> list[str]:
    """Operations that exist and stay queued: the poll finds them unchanged."""
    ids = []
    for key in keys:
        request = operations.CreateRequest("report.build", key, "report", key)
        row, _ = db.run(partial(_create, request=request), owner_id="alice")
        ids.append(row.id)
    return ids


def _run(db: Database, scenario: Callable[[Watcher[Version], Asked], Awaitable[None]]) -> None:
    async def main() -> None:
        asked = Asked()
        watcher = Watcher(db, "test_watch", AN_HOUR, lambda change: change.operation_id, asked)
        try:
            await scenario(watcher, asked)
        finally:
            await watcher.close()

    asyncio.run(main())


def _changed(operation_id: str, *, cancel_asked: bool = False, owner: str = "") -> Changed:
    return Changed(operation_id, RUNNING, "report.build", cancel_asked=cancel_asked, owner_id=owner)


def test_a_change_committed_here_wakes_every_kind_of_watch_at_once(db: Database) -> None:
    """The app's claim waiters, operation watch and owner watch all hear one delivery."""

    async def main() -> None:
        app = OperationsApp(db, utc_now, tuning=TUNING)
        try:
            with (
                app.watch.watching(moved(None, lambda: None), "op-1") as wait,
                app.owners.watching(owner_moved(), "alice") as owner,
            ):
                db.events.deliver([_changed("op-1", owner="alice")])
                assert (wait.take(), owner.take()) == ({"op-1"}, {"alice"})
        finally:
            await app.close()

    asyncio.run(main())


def test_a_cancel_watch_is_woken_by_a_cancel_only(db: Database) -> None:
    """A progress beat moves the running operation too; a stream woken by it would push a
    cancel nobody asked for."""

    async def scenario(watcher: Watcher[Version], asked: Asked) -> None:
        with watcher.watching(CANCEL, "op-1") as cancels:
            db.events.deliver([_changed("op-1")])
            assert not cancels.event.is_set()
            db.events.deliver([_changed("op-1", cancel_asked=True)])
            assert cancels.take() == {"op-1"}

    _run(db, scenario)


def test_a_key_wakes_a_watch_once_until_it_looks_again(db: Database) -> None:
    async def scenario(watcher: Watcher[Version], asked: Asked) -> None:
        with watcher.watching(moved(None, lambda: None), "op-1", "op-2") as watch:
            db.events.deliver([_changed("op-1")])
            assert watch.take() == {"op-1"}
            assert not watch.event.is_set()
            db.events.deliver([_changed("op-1")])
            assert not watch.event.is_set()  # woken already: told once
            assert watch.take() == set()
            db.events.deliver([_changed("op-2")])
            assert watch.take() == {"op-2"}
            watch.rearm()
            db.events.deliver([_changed("op-1")])
            assert watch.take() == {"op-1"}

    _run(db, scenario)


def test_looking_again_forgets_what_woke_the_watch_before(db: Database) -> None:
    """A wait reads again after ``rearm``: a wake left from before would send it round
    again at once (a read for nothing), and ``take`` would name a key already read."""

    async def scenario(watcher: Watcher[Version], asked: Asked) -> None:
        with watcher.watching(moved(None, lambda: None), "op-1") as watch:
            db.events.deliver([_changed("op-1")])
            watch.rearm()
            assert not watch.event.is_set()
            assert watch.take() == set()

    _run(db, scenario)


def test_a_key_dropped_and_watched_again_starts_afresh(db: Database) -> None:
    """A lease stream drops a lease's key once the holder learned of its cancel, and watches
    it afresh when the operation is claimed again: the old wake is neither taken later nor
    in the way of the new one."""

    async def scenario(watcher: Watcher[Version], asked: Asked) -> None:
        with watcher.watching(CANCEL, "op-1") as cancels:
            db.events.deliver([_changed("op-1", cancel_asked=True)])
            cancels.discard("op-1")
            assert cancels.take() == set()
            cancels.add("op-1")
            assert not cancels.woken("op-1")
            db.events.deliver([_changed("op-1", cancel_asked=True)])
            assert cancels.take() == {"op-1"}
        assert not watcher._waiting()

    _run(db, scenario)


def test_the_poll_asks_only_for_keys_not_woken(db: Database) -> None:
    one, two = _queued(db, "k1", "k2")

    async def scenario(watcher: Watcher[Version], asked: Asked) -> None:
        with (
            watcher.watching(moved(None, lambda: None), one, two) as first,
            watcher.watching(moved(None, lambda: None), two) as second,
        ):
            db.events.deliver([_changed(one)])
            assert await watcher._poll()
            assert asked.keys == [[two]]
            db.events.deliver([_changed(two)])  # both calls woken for it: nothing to ask
            assert not await watcher._poll()
            assert asked.keys == [[two]]
            assert (first.take(), second.take()) == ({one, two}, {two})

    _run(db, scenario)


def test_a_cancel_watch_is_asked_every_third_tick_the_others_on_each(db: Database) -> None:
    lease, wait = _queued(db, "lease", "wait")

    async def scenario(watcher: Watcher[Version], asked: Asked) -> None:
        with (
            watcher.watching(CANCEL, lease),
            watcher.watching(moved(None, lambda: None), wait) as waiting,
        ):
            for _ in range(3):
                assert await watcher._poll()
            assert asked.keys == [[wait], [wait], sorted([lease, wait])]
            assert not waiting.event.is_set()  # both found as they were
            waiting.discard(wait)
            assert [await watcher._poll() for _ in range(3)] == [False, False, True]
            assert asked.keys[3:] == [[lease]]

    _run(db, scenario)


def test_a_key_is_asked_for_on_each_tick_any_of_its_watches_is_due(db: Database) -> None:
    """A lease stream and a ``WaitOperation`` on one operation: the wait's key is asked on
    every tick though the stream's cancel watch is due on every third only."""
    (both,) = _queued(db, "both")

    async def scenario(watcher: Watcher[Version], asked: Asked) -> None:
        with watcher.watching(CANCEL, both), watcher.watching(moved(None, lambda: None), both):
            assert [await watcher._poll() for _ in range(3)] == [True, True, True]
            assert asked.keys == [[both]] * 3

    _run(db, scenario)


def test_an_owners_watch_is_woken_by_a_newer_change_only() -> None:
    """The first answer wakes it (it may have missed a change before it was watched); the
    same newest change found again does not."""
    first = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)
    second = datetime(2026, 12, 7, 9, 1, tzinfo=UTC)
    interest = owner_moved()
    assert [interest.found(newest) for newest in (first, first, second, second, None)] == [
        True,
        False,
        True,
        False,
        True,
    ]
