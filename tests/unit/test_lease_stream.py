"""The worker's one lease stream (``durable_ops.worker.lease``) against a scripted call, no I/O.

The fake call answers each beat as the service would (every held lease, each
alone) and lets a test refuse a lease, push a cancel or break the call.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

import grpc
import pytest

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.model.drafts import ANSWER_DRAFT_MAX_BYTES
from durable_ops.model.errors import LeaseLost
from durable_ops.worker.lease import HoldLeasesCall, Lease, LeaseStream

LEASE_SECONDS = 3  # a beat a second
GUARD = 5.0
ABORTED = grpc.StatusCode.ABORTED.value[0]


class FakeCall:
    """One HoldLeases call: answers every beat with an outcome per held lease."""

    def __init__(self, refused: set[str], cancelled: set[str] | None = None) -> None:
        self.requests: list[pb.HoldLeasesRequest] = []
        self.held: list[str] = []
        self.half_closed = False
        self.cancelled = False
        self._refused = refused
        self._cancelled = set() if cancelled is None else cancelled
        self._out: asyncio.Queue[Any] = asyncio.Queue()

    async def write(self, request: pb.HoldLeasesRequest) -> None:
        self.requests.append(request)
        self.held = [i for i in self.held if i not in request.dropped]
        outcomes = []
        for entry in request.leases:
            if entry.lease_token and entry.operation_id not in self.held:
                self.held.append(entry.operation_id)
        for operation_id in list(self.held):
            if operation_id in self._refused:
                self.held.remove(operation_id)
                outcomes.append(
                    pb.HoldLeasesResponse.Outcome(
                        operation_id=operation_id, status_code=ABORTED, error_code="lease_lost"
                    )
                )
            else:
                cancel = operation_id in self._cancelled
                outcomes.append(
                    pb.HoldLeasesResponse.Outcome(
                        operation_id=operation_id, cancel_requested=cancel
                    )
                )
        self._out.put_nowait(pb.HoldLeasesResponse(outcomes=outcomes))

    async def read(self) -> Any:
        message = await self._out.get()
        if isinstance(message, BaseException):
            raise message
        return message

    def push_cancel(self, operation_id: str) -> None:
        outcome = pb.HoldLeasesResponse.Outcome(operation_id=operation_id, cancel_requested=True)
        self._out.put_nowait(pb.HoldLeasesResponse(outcomes=[outcome], pushed=True))

    def end(self) -> None:
        """The replica went away: the stream ends without a status."""
        self._out.put_nowait(grpc.aio.EOF)

    def refuse(self, status: grpc.StatusCode) -> None:
        """The service ends the call with ``status`` (the worker's key no longer holds)."""
        metadata = grpc.aio.Metadata()
        self._out.put_nowait(grpc.aio.AioRpcError(status, metadata, metadata, "refused"))

    async def done_writing(self) -> None:
        self.half_closed = True
        self._out.put_nowait(grpc.aio.EOF)

    def cancel(self) -> bool:
        self.cancelled = True
        return True


@dataclass
class Held:
    operation_id: str
    owner_id: str = "alice"
    lease_token: str = "t" * 43

    def log_fields(self) -> dict[str, object]:
        return {"operation_id": self.operation_id}


class Harness:
    def __init__(self) -> None:
        self.calls: list[FakeCall] = []
        self.refused: set[str] = set()
        self.cancelled: set[str] = set()  # the owner asked to cancel: the answers say so
        self.down = False  # the replicas are gone: every call opened ends at once
        self.leases = LeaseStream(self._open)

    def _open(self) -> HoldLeasesCall:
        self.calls.append(FakeCall(self.refused, self.cancelled))
        if self.down:
            self.calls[-1].end()
        return cast(HoldLeasesCall, self.calls[-1])

    async def open(self, operation_id: str) -> Lease:
        return await self.leases.join(Held(operation_id), LEASE_SECONDS).ready()


def _run(scenario: Callable[[Harness], Awaitable[None]]) -> None:
    async def guarded() -> None:
        harness = Harness()
        async with asyncio.timeout(GUARD):
            await scenario(harness)
        await harness.leases.close()

    asyncio.run(guarded())


async def _until(check: Callable[[], bool]) -> None:
    while not check():
        await asyncio.sleep(0.01)


def _added(request: pb.HoldLeasesRequest) -> list[str]:
    return [entry.operation_id for entry in request.leases if entry.lease_token]


def test_leases_join_one_call_each_added_once_and_a_closed_one_is_dropped() -> None:
    async def scenario(h: Harness) -> None:
        first = await h.open("a")
        second = await h.open("b")
        assert len(h.calls) == 1
        call = h.calls[0]
        assert [_added(request) for request in call.requests] == [["a"], ["b"]]
        await first.close()
        await _until(lambda: len(call.requests) == 3)  # the next regular beat
        assert (list(call.requests[2].dropped), _added(call.requests[2])) == (["a"], [])
        assert call.held == ["b"]
        await second.close()
        await _until(lambda: call.half_closed)  # holding nothing, the stream ends
        assert h.leases.held == 0

    _run(scenario)


def test_a_refused_join_raises_and_a_lost_lease_ends_alone() -> None:
    async def scenario(h: Harness) -> None:
        h.refused.add("stale")
        with pytest.raises(LeaseLost):
            await h.open("stale")
        kept = await h.open("kept")
        going = await h.open("going")
        h.refused.add("going")
        await _until(going.ended.is_set)
        assert going.cancel_requested is False
        assert isinstance(going.error, LeaseLost)
        assert going.error.code == "lease_lost"
        assert not kept.ended.is_set()
        with pytest.raises(LeaseLost):
            await going.confirm()

    _run(scenario)


def test_confirming_a_lease_with_little_of_its_window_left_asks_the_service_first() -> None:
    """Before publishing, a lease whose last answer is old (the event loop or the service
    was slow) is confirmed by a beat of its own: a lease lost meanwhile raises, and
    nothing is published under it."""

    async def scenario(h: Harness) -> None:
        lease = await h.open("a")
        lease.live_until = time.monotonic() + 0.5  # the last answer came long ago
        h.refused.add("a")  # since then another worker claimed it
        with pytest.raises(LeaseLost):
            await lease.confirm()
        assert len(h.calls[0].requests) == 2

    _run(scenario)


def test_a_pushed_cancel_ends_that_lease_alone() -> None:
    async def scenario(h: Harness) -> None:
        target = await h.open("target")
        other = await h.open("other")
        h.calls[0].push_cancel("target")
        await _until(target.ended.is_set)
        assert (target.cancel_requested, target.lost) == (True, False)
        assert not other.ended.is_set()
        await _until(lambda: len(h.calls[0].requests) == 3)
        assert list(h.calls[0].requests[2].dropped) == ["target"]

    _run(scenario)


def test_a_cancel_told_in_the_answer_to_a_beat_ends_that_lease_alone() -> None:
    """The owner cancelled before the lease joined (or between a push and a new call):
    the answer is the only word of it, and the handler must stop."""

    async def scenario(h: Harness) -> None:
        other = await h.open("other")
        h.cancelled.add("target")
        target = await h.open("target")
        assert (target.ended.is_set(), target.cancel_requested, target.lost) == (True, True, False)
        assert not other.ended.is_set()

    _run(scenario)


def test_progress_goes_up_with_a_beat_and_is_sent_once() -> None:
    async def scenario(h: Harness) -> None:
        lease = await h.open("a")
        lease.report_progress(40)
        lease.report_progress(30)  # never decreasing: ignored
        call = h.calls[0]
        await _until(lambda: len(call.requests) == 2)
        entry = call.requests[1].leases[0]
        assert (entry.operation_id, entry.progress_percent, entry.lease_token) == ("a", 40, "")
        await _until(lambda: len(call.requests) == 3)
        assert list(call.requests[2].leases) == []

    _run(scenario)


def test_progress_stays_below_a_hundred_until_the_operation_completes() -> None:
    """100 is written by completion alone: a handler that says it is done and then fails
    (or loses its lease) must not have shown its owner a finished operation."""

    async def scenario(h: Harness) -> None:
        lease = await h.open("a")
        lease.report_progress(100)
        call = h.calls[0]
        await _until(lambda: len(call.requests) == 2)
        assert call.requests[1].leases[0].progress_percent == 99

    _run(scenario)


def test_answer_text_goes_whole_on_a_beat_only_when_it_changed_and_within_the_budget() -> None:
    async def scenario(h: Harness) -> None:
        lease = await h.open("a")
        lease.report_text('{"summary": "Str')
        lease.report_text('{"summary": "Strong')  # a beat carries the newest text, whole
        call = h.calls[0]
        await _until(lambda: len(call.requests) == 2)
        entry = call.requests[1].leases[0]
        assert (entry.operation_id, entry.answer_text) == ("a", '{"summary": "Strong')
        lease.report_text('{"summary": "Strong')  # unchanged: nothing new to send
        await _until(lambda: len(call.requests) == 3)
        assert list(call.requests[2].leases) == []
        lease.report_text("é" * ANSWER_DRAFT_MAX_BYTES)  # cut to the budget, never mid-character
        await _until(lambda: len(call.requests) == 4)
        sent = call.requests[3].leases[0].answer_text
        assert sent == "é" * (ANSWER_DRAFT_MAX_BYTES // 2)

    _run(scenario)


def test_a_broken_call_is_reopened_with_every_live_lease() -> None:
    async def scenario(h: Harness) -> None:
        leases = [await h.open(name) for name in ("a", "b")]
        h.calls[0].end()
        await _until(lambda: len(h.calls) == 2 and len(h.calls[1].requests) == 1)
        assert _added(h.calls[1].requests[0]) == ["a", "b"]
        assert h.calls[0].cancelled
        assert not any(lease.ended.is_set() for lease in leases)
        await leases[0].confirm()  # held: answered on the new call

    _run(scenario)


def test_a_reopened_call_carries_the_progress_again() -> None:
    """The beat that carried it may have been lost with the broken call: the owner must
    not be left with older progress until the work reports more."""

    async def scenario(h: Harness) -> None:
        lease = await h.open("a")
        lease.report_progress(40)
        await _until(lambda: len(h.calls[0].requests) == 2)
        h.calls[0].end()
        await _until(lambda: len(h.calls) == 2 and len(h.calls[1].requests) == 1)
        entry = h.calls[1].requests[0].leases[0]
        assert (entry.lease_token, entry.progress_percent) == ("t" * 43, 40)

    _run(scenario)


def test_a_stream_that_stays_broken_until_the_lease_runs_out_loses_it() -> None:
    """Past its window the service may hand the operation to another worker: the handler
    must stop, not go on as if it still held the lease."""

    async def scenario(h: Harness) -> None:
        lease = await h.leases.join(Held("a"), 1).ready()  # a one-second lease
        h.down = True
        h.calls[0].end()
        await _until(lease.ended.is_set)
        assert (lease.cancel_requested, lease.lost) == (False, True)
        assert isinstance(lease.error, LeaseLost)
        assert len(h.calls) > 1  # it was tried again meanwhile
        assert h.leases.held == 0

    _run(scenario)


def test_a_refused_stream_loses_every_lease_at_once_and_is_not_reopened() -> None:
    """Unlike a replica going away, a refusal of the call itself says nothing is held:
    the handlers stop now, not once their leases run out, and no call is retried."""

    async def scenario(h: Harness) -> None:
        leases = [await h.open(name) for name in ("a", "b")]
        h.calls[0].refuse(grpc.StatusCode.PERMISSION_DENIED)
        await _until(lambda: all(lease.ended.is_set() for lease in leases))
        assert [lease.error.code if lease.error else None for lease in leases] == [
            "permission_denied",
            "permission_denied",
        ]
        assert len(h.calls) == 1
        assert h.leases.held == 0

    _run(scenario)


def test_a_lease_asked_for_twice_at_once_is_one_lease() -> None:
    """An attempt's first progress and its watch may both ask for its lease at the same moment."""

    async def scenario(h: Harness) -> None:
        first, second = await asyncio.gather(h.open("a"), h.open("a"))
        assert first is second
        assert [_added(request) for request in h.calls[0].requests] == [["a"]]
        first.report_progress(40)
        await _until(lambda: len(h.calls[0].requests) == 2)
        assert h.calls[0].requests[1].leases[0].progress_percent == 40

    _run(scenario)


def test_a_new_claim_of_a_held_operation_replaces_its_lease_whole() -> None:
    async def scenario(h: Harness) -> None:
        old = await h.open("a")
        new = await h.leases.join(Held("a", lease_token="n" * 43), LEASE_SECONDS).ready()
        assert (old.lost, new.ended.is_set()) == (True, False)
        tokens = [entry.lease_token for entry in h.calls[0].requests[1].leases]
        assert tokens == ["n" * 43]
        assert list(h.calls[0].requests[1].dropped) == []

    _run(scenario)


def test_a_lease_that_left_and_was_claimed_again_before_the_next_beat_goes_out_whole() -> None:
    # Naming it dropped as well as added, the service would refuse the whole request
    # (``lease_named_twice``) and the worker would lose every lease it holds.
    async def scenario(h: Harness) -> None:
        old = await h.open("a")
        await h.open("b")
        await old.close()  # left: the next beat would drop it
        new = await h.leases.join(Held("a", lease_token="n" * 43), LEASE_SECONDS).ready()
        request = h.calls[0].requests[2]
        assert [entry.lease_token for entry in request.leases] == ["n" * 43]
        assert list(request.dropped) == []
        assert not new.ended.is_set()

    _run(scenario)
