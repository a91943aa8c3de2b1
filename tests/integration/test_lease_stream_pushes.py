"""When the lease streams (``operations.lease_streams``) push a cancel, and what they leave
watched: a holder learns of a cancel once, pushed or in a beat's answer, never for a
change that is not a cancel; a lease the stream no longer holds is no longer watched.

The streams are driven in-process on a real SQLite database, without gRPC: the test
hands each request to the stream and reads what it yields. The watch's poll rests an hour
and runs only where a test calls it (``_poll``), three times for a cancel's tick. That no
push came is seen by what the stream yields next: the answer to a beat sent afterwards.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import replace
from functools import partial
from typing import TypeVar

import pytest

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.clock import utc_now
from durable_ops.model.lifecycle import Event
from durable_ops.operations.app import OperationsApp
from durable_ops.operations.lease_streams import heartbeat, hold_leases
from durable_ops.operations.tuning import TUNING
from durable_ops.storage import operations
from durable_ops.storage.db import Database
from durable_ops.storage.tx import Tx

HANG_GUARD = 60.0  # only keeps a broken build from hanging; a loaded machine is slow
TASK = "report.build"
Message = TypeVar("Message")
Answer = TypeVar("Answer")


@pytest.fixture
def db(sqlite_db: Database) -> Database:
    return sqlite_db


def _claimed(db: Database, count: int) -> list[operations.Claim]:
    """Running operations of alice's, claimed without telling this process's waiters."""
    for n in range(count):
        request = operations.CreateRequest(TASK, f"k-{n}", "report", f"r-{n}")
        db.run(partial(_create, request=request), owner_id="alice")
    return db.run(
        lambda tx: operations.claim(tx, [TASK], 30, utc_now(), limit=count), owner_id=None
    )


def _create(tx: Tx, request: operations.CreateRequest) -> object:
    return operations.create(tx, request, utc_now())


def _cancelled_elsewhere(db: Database, operation_id: str) -> None:
    """A cancel taken by another replica: only the poll finds it."""
    db.run(lambda tx: operations.cancel(tx, operation_id, utc_now()), owner_id="alice")


class Requests(AsyncIterator[Message]):
    """A stream's requests, as the holder sends them; ``None`` ends it."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[Message | None] = asyncio.Queue()

    def send(self, request: Message | None) -> None:
        self._queue.put_nowait(request)

    async def __anext__(self) -> Message:
        request = await self._queue.get()
        if request is None:
            raise StopAsyncIteration
        return request


def _run(db: Database, scenario: Callable[[OperationsApp], Awaitable[None]]) -> None:
    async def main() -> None:
        app = OperationsApp(db, utc_now, tuning=replace(TUNING, watch_interval_seconds=3600))
        try:
            await asyncio.wait_for(scenario(app), HANG_GUARD)
        finally:
            await app.close()

    asyncio.run(main())


async def _settled() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def _cancel_tick(app: OperationsApp) -> None:
    """Poll ticks enough for a cancel watch's (``CANCEL.every_ticks``) to come round."""
    for _ in range(3):
        await app.watch._poll()


async def _next_after(
    stream: AsyncIterator[Answer],
    requests: Requests[Message],
    request: Message,
    meanwhile: Callable[[], Awaitable[None]] | None = None,
) -> Answer:
    """What the stream yields once it waits for the holder (and ``meanwhile`` ran) and
    ``request`` is sent then: a push, had one been due, comes before the request's answer."""
    answer = asyncio.ensure_future(anext(stream))
    await _settled()
    if meanwhile is not None:
        await meanwhile()
        await _settled()
    requests.send(request)
    return await answer


def _beat(claim: operations.Claim, progress: int | None = None) -> pb.HeartbeatRequest:
    return pb.HeartbeatRequest(
        operation_id=claim.operation.id, lease_token=claim.lease_token, progress_percent=progress
    )


async def _cancel(app: OperationsApp, operation_id: str) -> None:
    await app.cancel("alice", operation_id, lambda task_type: None)


def test_a_heartbeat_stream_pushes_a_cancel_once_and_a_progress_beat_never(
    db: Database,
) -> None:
    (claim,) = _claimed(db, 1)

    async def scenario(app: OperationsApp) -> None:
        requests: Requests[pb.HeartbeatRequest] = Requests()
        stream = heartbeat(app, "alice", requests)
        requests.send(_beat(claim))
        assert (await anext(stream)).cancel_requested is False
        # A progress beat is a change of the operation committed here, not a cancel.
        assert not (await _next_after(stream, requests, _beat(claim, 40))).pushed
        answer = await _next_after(stream, requests, _beat(claim))
        assert (answer.pushed, answer.cancel_requested) == (False, False)

        pushed = asyncio.ensure_future(anext(stream))
        await _settled()
        await _cancel(app, claim.operation.id)
        assert (await pushed).pushed
        answer = await _next_after(stream, requests, _beat(claim))
        assert (answer.pushed, answer.cancel_requested) == (False, True)
        answer = await _next_after(stream, requests, _beat(claim), partial(_cancel_tick, app))
        assert (answer.pushed, answer.cancel_requested) == (False, True)
        requests.send(None)
        assert [message async for message in stream] == []
        assert not app.watch._waiting()

    _run(db, scenario)


@pytest.mark.parametrize("told_by", ["the first beat", "a later beat"])
def test_a_heartbeat_stream_told_of_the_cancel_in_an_answer_pushes_nothing(
    db: Database, told_by: str
) -> None:
    (claim,) = _claimed(db, 1)
    if told_by == "the first beat":
        _cancelled_elsewhere(db, claim.operation.id)

    async def scenario(app: OperationsApp) -> None:
        requests: Requests[pb.HeartbeatRequest] = Requests()
        stream = heartbeat(app, "alice", requests)
        requests.send(_beat(claim))
        first = await anext(stream)
        if told_by == "a later beat":
            assert first.cancel_requested is False
            _cancelled_elsewhere(db, claim.operation.id)
            answer = await _next_after(stream, requests, _beat(claim))
            assert (answer.pushed, answer.cancel_requested) == (False, True)
        else:
            assert first.cancel_requested is True
        # The poll finds the cancel while the stream waits: the holder knows it already.
        answer = await _next_after(stream, requests, _beat(claim), partial(_cancel_tick, app))
        assert (answer.pushed, answer.cancel_requested) == (False, True)
        requests.send(None)
        assert [message async for message in stream] == []

    _run(db, scenario)


def _held(claim: operations.Claim, progress: int | None = None) -> pb.HeldLease:
    return pb.HeldLease(
        operation_id=claim.operation.id,
        owner_id="alice",
        lease_token=claim.lease_token,
        progress_percent=progress,
    )


def test_a_lease_stream_told_of_a_cancel_in_an_answer_does_not_push_it_after(
    db: Database,
) -> None:
    """The cancel, committed here, woke the stream's watch while the beat was on its way:
    the beat's answer tells it, and no push follows."""
    first, second = _claimed(db, 2)

    async def scenario(app: OperationsApp) -> None:
        requests: Requests[pb.HoldLeasesRequest] = Requests()
        stream = hold_leases(app, requests)
        requests.send(pb.HoldLeasesRequest(leases=[_held(first), _held(second)]))
        assert {o.operation_id for o in (await anext(stream)).outcomes} == {
            first.operation.id,
            second.operation.id,
        }
        await _cancel(app, first.operation.id)  # the stream is not waiting: no push yet
        requests.send(pb.HoldLeasesRequest())
        answer = await anext(stream)
        told = {o.operation_id: o.cancel_requested for o in answer.outcomes}
        assert (answer.pushed, told) == (
            False,
            {first.operation.id: True, second.operation.id: False},
        )
        answer = await _next_after(
            stream, requests, pb.HoldLeasesRequest(), partial(_cancel_tick, app)
        )
        assert not answer.pushed
        assert {o.operation_id for o in answer.outcomes} == {
            first.operation.id,
            second.operation.id,
        }
        requests.send(None)
        assert [message async for message in stream] == []
        assert not app.watch._waiting()

    _run(db, scenario)


def test_a_lease_the_stream_no_longer_holds_is_no_longer_watched(db: Database) -> None:
    """Dropped, refused or lost: its key would stay in every cancel poll while the stream
    is open (the push itself is filtered by what the stream holds)."""
    kept, dropped, refused, lost = _claimed(db, 4)

    async def scenario(app: OperationsApp) -> None:
        requests: Requests[pb.HoldLeasesRequest] = Requests()
        stream = hold_leases(app, requests)
        everything = [_held(kept), _held(dropped), _held(refused), _held(lost)]
        requests.send(pb.HoldLeasesRequest(leases=everything))
        assert all(o.status_code == 0 for o in (await anext(stream)).outcomes)
        assert set(app.watch._watches) == {c.operation.id for c in (kept, dropped, refused, lost)}

        db.run(  # another replica's cancel, acknowledged: the lease is over
            lambda tx: operations.cancel(tx, lost.operation.id, utc_now()), owner_id="alice"
        )
        settled = operations.Settlement(
            "alice",
            lost.operation.id,
            lost.lease_token,
            Event.ACKNOWLEDGE_CANCEL,
        )
        db.run(lambda tx: operations.settle(tx, [settled], utc_now()), owner_id=None)
        requests.send(
            pb.HoldLeasesRequest(
                leases=[_held(refused, progress=101)], dropped=[dropped.operation.id]
            )
        )
        outcomes = {o.operation_id: o.status_code for o in (await anext(stream)).outcomes}
        assert outcomes[kept.operation.id] == 0
        assert outcomes[refused.operation.id] != 0
        assert outcomes[lost.operation.id] != 0
        assert dropped.operation.id not in outcomes
        assert set(app.watch._watches) == {kept.operation.id}
        requests.send(None)
        assert [message async for message in stream] == []
        assert not app.watch._watches

    _run(db, scenario)


def test_a_stream_leaves_no_task_behind(db: Database) -> None:
    """Each wait for a beat or a cancel starts a task for the cancel; a long stream of beats
    must not keep one per beat. A stream its caller stops reading (the call was cancelled
    after a push) must not keep its pending read of the requests."""
    (claim,) = _claimed(db, 1)

    async def scenario(app: OperationsApp) -> None:
        requests: Requests[pb.HeartbeatRequest] = Requests()
        stream = heartbeat(app, "alice", requests)
        requests.send(_beat(claim))
        await anext(stream)
        assert not (await _next_after(stream, requests, _beat(claim))).pushed
        await _settled()
        before = asyncio.all_tasks()  # the test's, and the watch's poll
        for _ in range(5):
            assert not (await _next_after(stream, requests, _beat(claim))).pushed
        await _settled()
        assert asyncio.all_tasks() == before
        pushed = asyncio.ensure_future(anext(stream))
        await _settled()
        await _cancel(app, claim.operation.id)
        assert (await pushed).pushed
        assert isinstance(stream, AsyncGenerator)
        await stream.aclose()  # the holder went away
        await _settled()
        assert asyncio.all_tasks() == before

    _run(db, scenario)
