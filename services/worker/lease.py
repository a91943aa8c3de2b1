"""The heartbeat stream that holds one claimed operation's lease while the work runs.

The first beat names the lease and its length; its answer says whether the
owner already asked to cancel. A keeper then beats every third of the lease,
so at least two beats land in every lease window, and sooner (at most about
once a second) when the work reports new progress. Every beat is answered in
order; besides those answers, the service pushes the owner's cancel the moment
it is committed, so the work stops within a fraction of a second.

``ended`` is set when the owner asked to cancel or the lease is lost: an
ABORTED answer (the lease expired or moved to another attempt), an answer
refusing the lease, or a stream that stayed broken until the lease ran out.
A stream that breaks (its Operations replica restarted) does not end the
lease: the keeper reopens one, which round robin sends to another replica,
with the same token, for as long as the lease is live by its own reckoning.
The executor then stops the work and, having lost the lease, publishes
nothing. Temporal does the same: a failed heartbeat cancels the activity.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol, TypeAlias

import grpc
import structlog

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.model.errors import DomainError, LeaseLost, Unavailable
from durable_ops.model.progress import CEILING as PROGRESS_CEILING
from durable_ops.rpc.errors import domain_error_from_rpc

BEATS_PER_LEASE = 3
PROGRESS_BEAT_SECONDS = 1.0  # progress reaches the owner at most this often
CLOSE_TIMEOUT_SECONDS = 2.0
RECONNECT_FIRST_DELAY_SECONDS = 0.1
RECONNECT_MAX_DELAY_SECONDS = 2.0

_log = structlog.get_logger(__name__)

HeartbeatCall: TypeAlias = grpc.aio.StreamStreamCall[pb.HeartbeatRequest, pb.HeartbeatResponse]


class HeldOperation(Protocol):
    """The claimed operation a lease is held for."""

    @property
    def operation_id(self) -> str: ...
    @property
    def owner_id(self) -> str: ...
    @property
    def lease_token(self) -> str: ...
    def log_fields(self) -> dict[str, object]: ...


class StreamOpener(Protocol):
    def heartbeat_stream(self, owner_id: str) -> HeartbeatCall:
        """An open ``Heartbeat`` call in ``owner_id``'s scope."""
        ...


class StreamBroken(Exception):
    """The stream failed in transit; the lease itself may well be live."""


def _breaks_only_the_stream(error: DomainError) -> bool:
    # UNAVAILABLE, CANCELLED, INTERNAL, UNKNOWN: the replica or the network, not the lease.
    return isinstance(error, Unavailable) or type(error) is DomainError


class _Stream:
    """One open Heartbeat call: beats written in turn, every message read by one reader."""

    def __init__(self, call: HeartbeatCall, on_pushed_cancel: Callable[[], None]) -> None:
        self._call = call
        self._on_pushed_cancel = on_pushed_cancel
        self._answers: deque[asyncio.Future[pb.HeartbeatResponse]] = deque()
        self._writing = asyncio.Lock()
        self.broken: BaseException | None = None
        self._reader = asyncio.create_task(self._read())

    async def beat(self, request: pb.HeartbeatRequest, timeout: float) -> pb.HeartbeatResponse:
        """Send one beat and wait for its answer; ``StreamBroken`` or the refusal otherwise."""
        if self.broken is not None:
            raise self.broken
        answer: asyncio.Future[pb.HeartbeatResponse] = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(timeout):
                async with self._writing:
                    self._answers.append(answer)
                    await self._call.write(request)
                return await answer
        except TimeoutError:
            raise StreamBroken("no heartbeat answer in time") from None
        except grpc.aio.AioRpcError as exc:
            raise self._failed(exc) from exc
        except (grpc.aio.UsageError, asyncio.InvalidStateError) as exc:
            raise self._failed(StreamBroken("the heartbeat stream is closed")) from exc
        finally:
            # A beat given up on (timed out, or its write failed) leaves its answer
            # behind: done here, so a later failure of the stream is nobody's loose error.
            if not answer.done():
                answer.cancel()
            elif not answer.cancelled():
                answer.exception()

    async def _read(self) -> None:
        try:
            while True:
                message = await self._call.read()
                if not isinstance(message, pb.HeartbeatResponse):  # grpc.aio.EOF
                    raise StreamBroken("the heartbeat stream ended")
                if message.pushed:
                    if message.cancel_requested:
                        self._on_pushed_cancel()
                    continue
                if not self._answers:
                    raise StreamBroken("an answer to no beat")
                answer = self._answers.popleft()
                if not answer.done():
                    answer.set_result(message)
        except grpc.aio.AioRpcError as exc:
            self._failed(exc)
        except StreamBroken as exc:
            self._failed(exc)

    def _failed(self, error: BaseException) -> BaseException:
        if self.broken is None:
            if isinstance(error, grpc.aio.AioRpcError):
                domain = domain_error_from_rpc(error)
                error = StreamBroken(domain.code) if _breaks_only_the_stream(domain) else domain
            self.broken = error
            while self._answers:
                answer = self._answers.popleft()
                if not answer.done():
                    answer.set_exception(error)
        return self.broken

    async def close(self) -> None:
        """Half-close; the reader drains to the end, so the service ends the call cleanly.

        (Cancelling a task blocked in ``read`` would cancel the whole call.)
        """
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT_SECONDS):
                await self._call.done_writing()
                await self._reader
        except (grpc.aio.AioRpcError, TimeoutError, grpc.aio.UsageError, asyncio.CancelledError):
            self.cancel()

    def cancel(self) -> None:
        self._reader.cancel()
        self._call.cancel()


class Lease:
    def __init__(
        self,
        operations: StreamOpener,
        op: HeldOperation,
        lease_seconds: int,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._operations = operations
        self._op = op
        self.lease_seconds = lease_seconds
        self.interval = lease_seconds / BEATS_PER_LEASE
        self._clock = clock
        self.cancel_requested = False
        self.lost = False
        self.ended = asyncio.Event()
        self._stream: _Stream | None = None
        self._held_until = 0.0  # local estimate: when the last answered beat was sent + lease
        self._last_sent = 0.0
        self._progress = 0
        self._progress_sent = 0
        self._progress_reported = asyncio.Event()
        self._beating = asyncio.Lock()  # the keeper and ``confirm`` take turns on the stream
        self._keeper: asyncio.Task[None] | None = None
        self._closed = False

    @classmethod
    async def open(cls, operations: StreamOpener, op: HeldOperation, lease_seconds: int) -> Lease:
        """Open the stream and send the first beat; ``LeaseLost`` if the lease is gone."""
        lease = cls(operations, op, lease_seconds)
        try:
            await lease._connect()
        except StreamBroken as exc:
            raise LeaseLost(f"the first heartbeat failed ({exc})") from None
        if not lease.cancel_requested:
            lease._keeper = asyncio.create_task(lease._keep_alive())
        return lease

    def report_progress(self, percent: int) -> None:
        """The work's estimate, 0 to 99; sent on the next beat, at most about once a second."""
        percent = max(0, min(percent, PROGRESS_CEILING))
        if percent > self._progress:
            self._progress = percent
            self._progress_reported.set()

    async def confirm(self) -> None:
        """Make sure the lease has at least two thirds of its window left, else beat now.

        Called before publishing: the keeper normally guarantees it, unless the
        event loop or the service was slow.
        """
        if self.lost:
            raise LeaseLost("the lease was lost")
        if self._held_until - self._clock() >= self.lease_seconds - self.interval:
            return
        try:
            await self._beat_or_reconnect()
        except DomainError:
            self._end(lost=True)
            raise

    async def close(self) -> None:
        """Stop beating and end the stream; safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        if self._keeper is not None:
            self._keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keeper
        if self._stream is not None:
            await self._stream.close()

    # ---- the stream ---------------------------------------------------------------------

    async def _connect(self) -> None:
        """A new stream whose first beat names the lease (the first one, or after a break)."""
        if self._stream is not None:
            self._stream.cancel()
        call = self._operations.heartbeat_stream(self._op.owner_id)
        self._stream = _Stream(call, self._cancel_pushed)
        first = pb.HeartbeatRequest(
            operation_id=self._op.operation_id,
            lease_token=self._op.lease_token,
            lease_seconds=self.lease_seconds,
            progress_percent=self._progress,
        )
        try:
            await self._exchange(first)
        except BaseException:
            self._stream.cancel()
            raise

    async def _beat(self) -> None:
        request = pb.HeartbeatRequest()
        if self._progress > self._progress_sent:
            request.progress_percent = self._progress
        await self._exchange(request)

    async def _exchange(self, request: pb.HeartbeatRequest) -> None:
        assert self._stream is not None
        sent = self._last_sent = self._clock()
        progress = request.progress_percent if request.HasField("progress_percent") else None
        answer = await self._stream.beat(request, timeout=self._time_left(sent))
        self._held_until = sent + self.lease_seconds
        if progress is not None:
            self._progress_sent = max(self._progress_sent, progress)
        if answer.cancel_requested:
            self._cancel_pushed()

    def _time_left(self, now: float) -> float:
        """How long an answer may take: until the lease runs out (a whole lease at first)."""
        if self._held_until == 0.0:
            return float(self.lease_seconds)
        return max(self._held_until - now, 0.001)

    def _cancel_pushed(self) -> None:
        self.cancel_requested = True
        self._end(lost=False)

    # ---- the keeper -------------------------------------------------------------------------

    async def _keep_alive(self) -> None:
        try:
            while not self.ended.is_set():
                await self._until_next_beat()
                await self._beat_or_reconnect()
        except DomainError as error:
            _log.warning("lease_lost", **self._op.log_fields(), code=error.code)
            self._end(lost=True)
        except Exception as error:  # a bug: the lease cannot be vouched for any more
            _log.warning("lease_lost", **self._op.log_fields(), code=type(error).__name__)
            self._end(lost=True)

    async def _beat_or_reconnect(self) -> None:
        async with self._beating:
            try:
                await self._beat()
            except StreamBroken as broken:
                await self._reconnect(broken)

    async def _until_next_beat(self) -> None:
        while True:
            due = self._last_sent + self.interval
            if self._progress > self._progress_sent:
                due = min(due, self._last_sent + PROGRESS_BEAT_SECONDS)
            wait = due - self._clock()
            if wait <= 0:
                return
            self._progress_reported.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._progress_reported.wait()

    async def _reconnect(self, broken: StreamBroken) -> None:
        """Reopen the stream while the lease is live; ``LeaseLost`` once it cannot be."""
        delay = RECONNECT_FIRST_DELAY_SECONDS
        _log.warning("heartbeat_stream_broken", **self._op.log_fields(), reason=str(broken))
        while self._clock() < self._held_until:
            try:
                await self._connect()
            except StreamBroken:
                await asyncio.sleep(min(delay, max(self._held_until - self._clock(), 0)))
                delay = min(delay * 2, RECONNECT_MAX_DELAY_SECONDS)
                continue
            _log.info("heartbeat_stream_reopened", **self._op.log_fields())
            return
        raise LeaseLost("the heartbeat stream stayed broken until the lease ran out")

    def _end(self, *, lost: bool) -> None:
        self.lost = self.lost or lost
        self.ended.set()
