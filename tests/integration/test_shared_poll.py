"""The shared poll (``shared_poll``) rests in proportion to how long its question took,
is asked again on the next tick after a failure, and ends by itself once nobody waits."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import structlog
import structlog.testing
from structlog.testing import capture_logs

from durable_ops.operations.shared_poll import REST_PER_POLL_SECOND, SharedPoll, rest_after
from durable_ops.storage.db import Database
from durable_ops.storage.events import Committed

HANG_GUARD = 10.0  # only keeps a broken build from hanging


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


class FailingThenIdle(SharedPoll):
    """A poll whose question fails ``failures`` times, then finds nobody due for ``idle``
    polls (it asks nothing), then asks; each poll says in the log what it did."""

    def __init__(self, db: Database, failures: int, idle: int) -> None:
        super().__init__(db, "flaky", 0.001)
        self.outcomes = ["failed"] * failures + ["idle"] * idle + ["asked"]

    def _committed(self, changes: Sequence[Committed]) -> None:
        pass

    def _waiting(self) -> bool:
        return bool(self.outcomes)

    async def _poll(self) -> bool:
        outcome = self.outcomes.pop(0)
        structlog.get_logger().info(outcome, bound=structlog.contextvars.get_contextvars())
        if outcome == "failed":
            raise ConnectionError("the database is away")
        return outcome == "asked"


def test_a_failing_poll_recovers_only_once_its_question_is_answered(tmp_path: Path) -> None:
    """In an outage the log read ``poll_failing``, ``poll_recovered`` a tenth of a second
    later, then ``poll_failing`` again: the poll had found no waiter due and asked the
    database nothing, which is not the database answering. And the lines of the Operations
    service said ``process=services`` (the four services' shared child), not ``operations``:
    the poll runs in a context of its own, which had lost the service's name."""
    db = Database(f"sqlite:///{tmp_path / 'unused.db'}")

    async def main() -> None:
        structlog.contextvars.bind_contextvars(process="operations")
        poll = FailingThenIdle(db, failures=2, idle=2)
        poll._ensure_polling()
        while poll.outcomes:
            await asyncio.sleep(0.01)
        await poll.close()

    try:
        with structlog.testing.capture_logs() as lines:
            asyncio.run(main())
    finally:
        db.dispose()
    assert [line["event"] for line in lines] == [
        "failed",
        "poll_failing",
        "failed",
        "idle",
        "idle",
        "asked",
        "poll_recovered",
    ]
    assert {line["bound"].get("process") for line in lines if "bound" in line} == {"operations"}


class FailingFirst(SharedPoll):
    """A poll whose first ``failures`` questions fail (the database is away); ``waiting``
    says whether anyone waits."""

    def __init__(self, db: Database, failures: int, *, waiting: bool = True) -> None:
        super().__init__(db, "failing", 0.001)
        self.failures = failures
        self.waiting = waiting
        self.answered = asyncio.Event()

    def _committed(self, changes: Sequence[Committed]) -> None:
        pass

    def _waiting(self) -> bool:
        return self.waiting

    async def _poll(self) -> bool:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("the database is away")
        self.answered.set()
        return True


def test_a_failed_poll_is_logged_once_and_asked_again_on_the_next_tick(tmp_path: Path) -> None:
    """A poll that stopped at its first failure left every waiter of the replica without
    other replicas' changes until some new call started it again."""
    db = Database(f"sqlite:///{tmp_path / 'unused.db'}")

    async def main() -> int:
        poll = FailingFirst(db, failures=2)
        poll._ensure_polling()
        await asyncio.wait_for(poll.answered.wait(), HANG_GUARD)
        await poll.close()
        return poll.polls

    try:
        with capture_logs() as logged:
            assert asyncio.run(main()) >= 1
    finally:
        db.dispose()
    said = [entry["event"] for entry in logged if entry.get("poll") == "failing"]
    assert said == ["poll_failing", "poll_recovered"]


def test_a_poll_nobody_waits_for_ends_by_itself(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'unused.db'}")

    async def main() -> None:
        poll = FailingFirst(db, failures=0, waiting=False)
        poll._ensure_polling()
        assert poll._task is not None
        await asyncio.wait_for(poll._task, HANG_GUARD)
        assert not poll.answered.is_set()
        await poll.close()

    try:
        asyncio.run(main())
    finally:
        db.dispose()
