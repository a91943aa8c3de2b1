"""Who a replica's claim waiters wake, in the cases ``test_claim_waiters.py`` leaves open: an
arrival already tried is not passed on, a claim back from its wait is no longer waiting, a
full batch never wakes the claim that took it, what this process commits wakes claims by
what it says (a requeue, a scheduled create), and the poll asks only for idle claims.

The waiters are driven directly on a real SQLite database; the shared poll rests an hour,
so it runs only where a test calls it.
"""

from __future__ import annotations

import asyncio

import pytest

from durable_ops.clock import utc_now
from durable_ops.model.states import OperationState
from durable_ops.operations.claim_waiters import ClaimWaiter, ClaimWaiters, Kind
from durable_ops.storage import operations
from durable_ops.storage.db import Database
from durable_ops.storage.events import Changed, Requeued
from tests.integration.test_claim_waiters import HANG_GUARD, _run, _settled, _waiting

NOOP: Kind = ("queued", "bench.noop")
OTHER: Kind = ("queued", "report.render")


@pytest.fixture
def db(sqlite_db: Database) -> Database:
    return sqlite_db


def _woken(waiter: ClaimWaiter) -> bool:
    return waiter._woken.is_set()


def _create(db: Database, kind: Kind, key: str) -> None:
    request = operations.CreateRequest(
        task_type=kind[1], idempotency_key=key, subject_type="doc", subject_id=key
    )
    db.run(lambda tx: operations.create(tx, request, utc_now()), owner_id="alice")


def test_an_arrival_the_claim_tried_for_is_not_passed_on_when_it_leaves(db: Database) -> None:
    """Its try took the work (or found it taken): passing it on would wake another claim
    for nothing."""

    async def scenario(waiters: ClaimWaiters) -> None:
        with waiters.waiting(frozenset({NOOP})) as other:
            other.trying()
            with waiters.waiting(frozenset({NOOP})) as leaving:
                woken = await _waiting(leaving)
                waiters.arrived(*NOOP)
                assert await asyncio.wait_for(woken, HANG_GUARD)
                leaving.trying()  # it claims what arrived, then its call ends
            assert not _woken(other)

    _run(db, scenario)


def test_a_claim_back_from_its_wait_no_longer_counts_as_waiting(db: Database) -> None:
    """Woken, it tries again: an arrival during that try goes to a claim still waiting, and
    the poll (asked only for claims that wait) asks nothing for it."""

    async def scenario(waiters: ClaimWaiters) -> None:
        with (
            waiters.waiting(frozenset({NOOP})) as back,
            waiters.waiting(frozenset({NOOP})) as still,
        ):
            still.trying()  # not waiting yet
            back_waits = await _waiting(back)
            waiters.arrived(*NOOP)
            assert await asyncio.wait_for(back_waits, HANG_GUARD)
            back.trying()
            assert not await waiters._poll()
            still_waits = await _waiting(still)
            waiters.arrived(*NOOP)
            await _settled()
            assert still_waits.done()
            assert not _woken(back)

    _run(db, scenario)


def test_a_full_batch_wakes_another_claim_never_its_own(db: Database) -> None:
    """Neither waits (both are between tries): the one that filled its batch tries again
    anyway if it loops, so the wake is for the other."""

    async def scenario(waiters: ClaimWaiters) -> None:
        with (
            waiters.waiting(frozenset({NOOP}), 2) as full,
            waiters.waiting(frozenset({NOOP})) as other,
        ):
            full.trying()
            other.trying()
            waiters.took(full, 2)
            assert (_woken(full), _woken(other)) == (False, True)

    _run(db, scenario)


def test_a_requeue_committed_here_wakes_every_waiting_claim(db: Database) -> None:
    async def scenario(waiters: ClaimWaiters) -> None:
        with (
            waiters.waiting(frozenset({NOOP})) as first,
            waiters.waiting(frozenset({OTHER})) as second,
        ):
            tasks = [await _waiting(first), await _waiting(second)]
            db.events.deliver([Requeued()])
            assert await asyncio.wait_for(asyncio.gather(*tasks), HANG_GUARD) == [True, True]

    _run(db, scenario)


def test_a_create_committed_here_wakes_a_claim_unless_it_is_scheduled(db: Database) -> None:
    """A create for later (``not_before``) is not claimable yet: a claim woken for it would
    find nothing. A running operation's change is no claim's work either."""

    async def scenario(waiters: ClaimWaiters) -> None:
        with waiters.waiting(frozenset({NOOP})) as claim:
            waits = await _waiting(claim)
            db.events.deliver(
                [
                    Changed("later", OperationState.QUEUED, NOOP[1], scheduled=True),
                    Changed("started", OperationState.RUNNING, NOOP[1]),
                ]
            )
            await _settled()
            assert not waits.done()
            db.events.deliver([Changed("now", OperationState.QUEUED, NOOP[1])])
            assert await asyncio.wait_for(waits, HANG_GUARD)

    _run(db, scenario)


def test_the_poll_asks_only_for_claims_that_wait_and_were_not_woken(db: Database) -> None:
    _create(db, NOOP, "k-noop")
    _create(db, OTHER, "k-other")

    async def scenario(waiters: ClaimWaiters) -> None:
        with (
            waiters.waiting(frozenset({NOOP})) as woken,
            waiters.waiting(frozenset({OTHER})) as trying,
        ):
            woken_waits = await _waiting(woken)
            trying.trying()
            waiters.arrived(*NOOP)  # woken; its task has not run since
            assert not await waiters._poll()  # nobody idle: nothing asked
            assert await asyncio.wait_for(woken_waits, HANG_GUARD)
            idle_waits = await _waiting(woken)
            assert await waiters._poll()  # asked for the idle claim's kinds, not the other's
            assert await asyncio.wait_for(idle_waits, HANG_GUARD)
            assert not _woken(trying)

    _run(db, scenario)
