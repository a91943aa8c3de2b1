"""A shared poll (``shared_poll``) that ended because nobody waited starts again for the next
waiter, and a closed one hears no more of what this process commits."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from durable_ops.model.states import OperationState
from durable_ops.operations.shared_poll import SharedPoll
from durable_ops.storage.db import Database
from durable_ops.storage.events import Changed, Committed

HANG_GUARD = 10.0  # only keeps a broken build from hanging
QUEUED = Changed("op", OperationState.QUEUED, "report.build")


class Switched(SharedPoll):
    """A poll whose waiters come and go (``waiting``); it records what it hears."""

    def __init__(self, db: Database) -> None:
        super().__init__(db, "switched", 0.001)
        self.waiting = False
        self.asked = asyncio.Event()
        self.heard: list[Committed] = []

    def _committed(self, changes: Sequence[Committed]) -> None:
        self.heard.extend(changes)

    def _waiting(self) -> bool:
        return self.waiting

    async def _poll(self) -> bool:
        self.asked.set()
        return True


def test_a_poll_that_ended_starts_again_for_the_next_waiter(tmp_path: Path) -> None:
    """A replica's waits go quiet, the poll ends; a wait that comes later must still hear of
    other replicas' changes."""
    db = Database(f"sqlite:///{tmp_path / 'unused.db'}")

    async def main() -> None:
        poll = Switched(db)
        poll._ensure_polling()
        ended = poll._task
        assert ended is not None
        await asyncio.wait_for(ended, HANG_GUARD)  # nobody waited
        assert not poll.asked.is_set()
        poll.waiting = True
        poll._ensure_polling()
        await asyncio.wait_for(poll.asked.wait(), HANG_GUARD)
        await poll.close()

    try:
        asyncio.run(main())
    finally:
        db.dispose()


def test_a_closed_poll_hears_no_more_commits(tmp_path: Path) -> None:
    """Each app (a test's, a restarted server's) subscribes its polls to the database's
    bus: one closed and still subscribed would be told, and kept, for the bus's life."""
    db = Database(f"sqlite:///{tmp_path / 'unused.db'}")

    async def main() -> list[Committed]:
        poll = Switched(db)
        db.events.deliver([QUEUED])
        await poll.close()
        db.events.deliver([QUEUED])
        return poll.heard

    try:
        assert asyncio.run(main()) == [QUEUED]
    finally:
        db.dispose()
