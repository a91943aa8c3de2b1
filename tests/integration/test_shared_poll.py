"""The shared poll rests in proportion to how long its question took (``shared_poll``)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from durable_ops.operations.shared_poll import REST_PER_POLL_SECOND, SharedPoll, rest_after
from durable_ops.storage.db import Database
from durable_ops.storage.events import Committed


class SlowQuestion(SharedPoll):
    """A poll whose question takes ``took`` seconds, and one waiter for ever."""

    def __init__(self, db: Database, interval: float, took: float) -> None:
        super().__init__(db, "slow", interval)
        self.took = took

    def _committed(self, changes: Sequence[Committed]) -> None:
        pass

    def _waiting(self) -> bool:
        return True

    async def _poll(self) -> bool:
        await asyncio.sleep(self.took)
        return True


def test_a_fast_question_is_asked_every_interval_a_slow_one_rests_longer() -> None:
    assert rest_after(0.05, 0.002) == 0.05
    assert rest_after(0.05, 0.1) == REST_PER_POLL_SECOND * 0.1


def test_a_slow_poll_holds_the_database_at_most_a_fifth_of_the_time(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'unused.db'}")

    async def main() -> int:
        poll = SlowQuestion(db, interval=0.001, took=0.05)
        poll._ensure_polling()
        await asyncio.sleep(0.6)
        await poll.close()
        return poll.polls

    try:
        # Asked back to back it would have been asked about 11 times; resting 4 x 0.05 s
        # after each, 2 or 3.
        assert asyncio.run(main()) <= 4
    finally:
        db.dispose()
