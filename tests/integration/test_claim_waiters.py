"""How a replica's waiting claims are woken (ADR 0024): one claim per arrival, not all;
and its claim transactions take turns.

The waiters are driven directly, on a real (unused) database: the shared poll
is set to an hour, so only arrivals wake a claim here. Claims through the
server are in ``test_lease_channel.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from durable_ops.clock import utc_now
from durable_ops.operations.claim_waiters import ClaimWaiter, ClaimWaiters, Kind
from durable_ops.storage import operations
from durable_ops.storage.db import Database
from tests.conftest import MigratedSqlite

HANG_GUARD = 30.0  # only keeps a broken build from hanging; a loaded machine is slow
NOOP: Kind = ("queued", "bench.noop")
OTHER: Kind = ("queued", "report.render")


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = Database(f"sqlite:///{tmp_path / 'unused.db'}")
    yield database
    database.dispose()


@pytest.fixture
def migrated(tmp_path: Path, migrated_sqlite: MigratedSqlite) -> Iterator[Database]:
    """A database the poll can ask: migrated."""
    database = Database(migrated_sqlite(tmp_path / "ops.db"))
    yield database
    database.dispose()


def _run(
    db: Database,
    scenario: Callable[[ClaimWaiters], Awaitable[None]],
    interval_seconds: float = 3600,
) -> None:
    async def main() -> None:
        waiters = ClaimWaiters(db, utc_now, interval_seconds=interval_seconds)
        try:
            await scenario(waiters)
        finally:
            await waiters.close()

    asyncio.run(main())


async def _waiting(waiter: ClaimWaiter) -> asyncio.Task[bool]:
    """``waiter`` waiting in a task of its own, as a claim between its tries."""
    waiter.trying()
    task = asyncio.create_task(waiter.wait(HANG_GUARD))
    await asyncio.sleep(0)  # it is waiting now
    return task


async def _settled() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


def test_an_arrival_wakes_the_longest_waiting_claim_only(db: Database) -> None:
    async def scenario(waiters: ClaimWaiters) -> None:
        with ExitStack() as stack:
            claims = [stack.enter_context(waiters.waiting(frozenset({NOOP}))) for _ in range(3)]
            tasks = [await _waiting(claim) for claim in claims]
            waiters.arrived(*NOOP)
            await _settled()
            assert [task.done() for task in tasks] == [True, False, False]
            waiters.arrived(*NOOP)
            await _settled()
            assert [task.done() for task in tasks] == [True, True, False]
            tasks[2].cancel()

    _run(db, scenario)


def test_a_woken_claim_takes_arrivals_up_to_its_capacity_then_another_is_woken(
    db: Database,
) -> None:
    async def scenario(waiters: ClaimWaiters) -> None:
        with (
            waiters.waiting(frozenset({NOOP}), 2) as first,
            waiters.waiting(frozenset({NOOP}), 2) as second,
        ):
            first_waits, second_waits = await _waiting(first), await _waiting(second)
            waiters.arrived(*NOOP)
            waiters.arrived(*NOOP)  # dealt to the woken claim: it has room for two
            await _settled()
            assert first_waits.done()
            assert not second_waits.done()
            waiters.arrived(*NOOP)  # the first is full
            await _settled()
            assert second_waits.done()

    _run(db, scenario)


def test_a_new_claim_takes_what_arrives_before_its_first_try(db: Database) -> None:
    async def scenario(waiters: ClaimWaiters) -> None:
        with waiters.waiting(frozenset({NOOP})) as waiting:
            waits = await _waiting(waiting)
            with waiters.waiting(frozenset({NOOP}), 2) as new:  # waiting for its turn, say
                waiters.arrived(*NOOP)
                waiters.arrived(*NOOP)
                await _settled()
                assert not waits.done()  # the new claim will take both: nobody else is woken
                assert await new.wait(0)
                new.trying()
            waits.cancel()

    _run(db, scenario)


def test_a_full_batch_wakes_one_more_claim_and_a_partial_one_none(db: Database) -> None:
    async def scenario(waiters: ClaimWaiters) -> None:
        with ExitStack() as stack:
            claiming = stack.enter_context(waiters.waiting(frozenset({NOOP}), 2))
            others = [stack.enter_context(waiters.waiting(frozenset({NOOP}))) for _ in range(2)]
            tasks = [await _waiting(other) for other in others]
            claiming.trying()
            waiters.took(claiming, 1)  # took less than it could: nothing is left
            await _settled()
            assert [task.done() for task in tasks] == [False, False]
            claiming.trying()
            waiters.took(claiming, 2)  # full: there may be more, for one more claim
            await _settled()
            assert [task.done() for task in tasks] == [True, False]
            tasks[1].cancel()

    _run(db, scenario)


def test_work_of_another_kind_wakes_no_claim(db: Database) -> None:
    async def scenario(waiters: ClaimWaiters) -> None:
        with waiters.waiting(frozenset({NOOP})) as claim:
            task = await _waiting(claim)
            waiters.arrived(*OTHER)
            await _settled()
            assert not task.done()
            task.cancel()

    _run(db, scenario)


def test_a_claim_that_leaves_before_its_try_passes_its_arrival_on(db: Database) -> None:
    async def scenario(waiters: ClaimWaiters) -> None:
        with waiters.waiting(frozenset({NOOP})) as staying:
            staying.trying()  # in a try, not waiting: an arrival goes to a waiting claim first
            with waiters.waiting(frozenset({NOOP})) as leaving:
                leaving_waits = await _waiting(leaving)
                waiters.arrived(*NOOP)
                await _settled()
                assert leaving_waits.done()
            # ``leaving`` ended (its call was cancelled, say) before trying: the arrival goes on
            assert await staying.wait(0)

    _run(db, scenario)


def test_work_of_unknown_amount_wakes_every_claim(db: Database) -> None:
    async def scenario(waiters: ClaimWaiters) -> None:
        with ExitStack() as stack:
            claims = [stack.enter_context(waiters.waiting(frozenset({NOOP}))) for _ in range(3)]
            tasks = [await _waiting(claim) for claim in claims]
            waiters.arrived_any()
            assert all(await asyncio.wait_for(asyncio.gather(*tasks), HANG_GUARD))

    _run(db, scenario)


def test_turns_are_one_at_a_time(db: Database) -> None:
    async def scenario(waiters: ClaimWaiters) -> None:
        inside: list[int] = []
        most = 0

        async def claim() -> None:
            nonlocal most
            async with waiters.turn():
                inside.append(1)
                most = max(most, len(inside))
                await asyncio.sleep(0.01)
                inside.pop()

        await asyncio.wait_for(asyncio.gather(*(claim() for _ in range(4))), HANG_GUARD)
        assert most == 1

    _run(db, scenario)


def test_work_the_poll_finds_wakes_one_claim_not_all(migrated: Database) -> None:
    """Work that appeared through another replica, found by the shared poll, wakes one
    claim, not every claim that can take it (a full batch wakes the next, above)."""
    request = operations.CreateRequest(
        task_type=NOOP[1], idempotency_key="k-poll", subject_type="doc", subject_id="1"
    )
    migrated.run(lambda tx: operations.create(tx, request, utc_now()), owner_id="alice")

    async def scenario(waiters: ClaimWaiters) -> None:
        with ExitStack() as stack:
            claims = [stack.enter_context(waiters.waiting(frozenset({NOOP}))) for _ in range(3)]
            tasks = [await _waiting(claim) for claim in claims]
            await asyncio.wait(tasks, timeout=HANG_GUARD, return_when=asyncio.FIRST_COMPLETED)
            await _settled()
            assert sum(task.done() for task in tasks) == 1
            for task in tasks:
                task.cancel()

    _run(migrated, scenario, interval_seconds=0.05)


def test_no_poll_is_asked_while_no_claim_waits(migrated: Database) -> None:
    """A claim about to try, or trying, will see what is there: the poll (a read of every
    claimable row) is asked only for a claim that found nothing and waits."""

    async def scenario(waiters: ClaimWaiters) -> None:
        with waiters.waiting(frozenset({NOOP})) as claim:
            claim.trying()  # draining: it tries again and again, and never waits
            await asyncio.sleep(0.2)
            assert waiters.polls == 0
            task = await _waiting(claim)
            await asyncio.sleep(0.2)
            assert waiters.polls > 0
            task.cancel()

    _run(migrated, scenario, interval_seconds=0.01)
