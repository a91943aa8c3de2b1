"""One lease stream per worker holds the leases of all its running attempts (ADR 0026).

An attempt's ``Lease`` joins its worker's ``LeaseStream``: the join goes out on the
next beat at once, and its answer says whether the owner already asked to
cancel. The stream then beats every third of the shortest lease it holds, so
at least two beats land in every lease window, and sooner (at most about once
a second) when an attempt reports new progress. Every beat extends every lease on
the stream with one UPDATE on the service and is answered in order, lease by
lease; besides those answers, the service pushes the owner's cancel of a lease
the moment it is committed, so that attempt stops within a fraction of a second.
A lease that ends (its attempt closes it, its owner cancels, it is lost) leaves the
stream; the stream closes once it holds none.

A lease's ``ended`` is set when the owner asked to cancel or the lease is lost:
an answer refusing it (ABORTED: it expired or moved to another attempt), or a
stream that stayed broken until the lease ran out. A stream that breaks (its
Operations replica restarted) does not end the leases: the stream reopens,
which round robin sends to another replica, and adds them again with their
tokens, for as long as each is live by its own reckoning. The attempt then stops
and, having lost the lease, publishes nothing. Temporal does the same: a
failed heartbeat cancels the activity.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Protocol, TypeAlias

import grpc
import structlog

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.model.errors import DomainError, LeaseLost, Unavailable
from durable_ops.model.progress import CEILING as PROGRESS_CEILING
from durable_ops.rpc.errors import domain_error_from_rpc, domain_error_from_status

BEATS_PER_LEASE = 3
PROGRESS_BEAT_SECONDS = 1.0  # progress reaches the owner at most this often
CLOSE_TIMEOUT_SECONDS = 2.0
RECONNECT_FIRST_DELAY_SECONDS = 0.1
RECONNECT_MAX_DELAY_SECONDS = 2.0

_log = structlog.get_logger(__name__)

HoldLeasesCall: TypeAlias = grpc.aio.StreamStreamCall[pb.HoldLeasesRequest, pb.HoldLeasesResponse]
Outcome = pb.HoldLeasesResponse.Outcome


class HeldOperation(Protocol):
    """The claimed operation a lease is held for."""

    @property
    def operation_id(self) -> str: ...
    @property
    def owner_id(self) -> str: ...
    @property
    def lease_token(self) -> str: ...
    def log_fields(self) -> dict[str, object]: ...


class HoldsLeases(Protocol):
    """Whoever keeps a worker's one lease stream (the SDK's ``Worker``, the AI worker)."""

    @property
    def leases(self) -> LeaseStream: ...


class StreamBroken(Exception):
    """The stream failed in transit; the leases themselves may well be live."""


def _breaks_only_the_stream(error: DomainError) -> bool:
    # UNAVAILABLE, CANCELLED, INTERNAL, UNKNOWN: the replica or the network, not the leases.
    return isinstance(error, Unavailable) or type(error) is DomainError


class _Call:
    """One open HoldLeases call: beats written in turn, every message read by one reader."""

    def __init__(
        self, call: HoldLeasesCall, on_pushed: Callable[[Iterable[Outcome]], None]
    ) -> None:
        self._call = call
        self._on_pushed = on_pushed
        self._answers: deque[asyncio.Future[pb.HoldLeasesResponse]] = deque()
        self._writing = asyncio.Lock()
        self.broken: BaseException | None = None
        self._reader = asyncio.create_task(self._read())

    async def beat(self, request: pb.HoldLeasesRequest, timeout: float) -> pb.HoldLeasesResponse:
        """Send one beat and wait for its answer; ``StreamBroken`` or the refusal otherwise."""
        if self.broken is not None:
            raise self.broken
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[pb.HoldLeasesResponse] = loop.create_future()
        try:
            async with asyncio.timeout(timeout):
                async with self._writing:
                    self._answers.append(answer)
                    await self._call.write(request)
                return await answer
        except TimeoutError:
            raise StreamBroken("no answer to the beat in time") from None
        except grpc.aio.AioRpcError as exc:
            raise self._failed(exc) from exc
        except (grpc.aio.UsageError, asyncio.InvalidStateError) as exc:
            raise self._failed(StreamBroken("the lease stream is closed")) from exc
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
                if not isinstance(message, pb.HoldLeasesResponse):  # grpc.aio.EOF
                    raise StreamBroken("the lease stream ended")
                if message.pushed:
                    self._on_pushed(message.outcomes)
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


class LeaseStream:
    """The one HoldLeases stream of a worker (of a channel), open while it holds leases."""

    def __init__(
        self,
        open_call: Callable[[], HoldLeasesCall],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._open_call = open_call
        self._clock = clock
        self._leases: dict[str, Lease] = {}  # held, in the order they joined
        self._on_call: set[str] = set()  # added on the current call; others join on the next beat
        self._dropped: set[str] = set()  # left since the last beat; the service is told then
        self._call: _Call | None = None
        self._keeper: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._urgent = False  # a lease asked to be confirmed: beat now
        self._last_beat = 0.0

    @property
    def held(self) -> int:
        return len(self._leases)

    async def hold(self, op: HeldOperation, lease_seconds: int) -> Lease:
        """The lease of ``op``, held from the next beat on (sent at once) once answered;
        the error that refused it. Asked again while held, the same ``Lease``: an attempt's
        progress and its watch may both ask for it at the same moment."""
        lease = self._leases.get(op.operation_id)
        if lease is not None and lease.token != op.lease_token:  # claimed again since
            self._lose([lease], LeaseLost("the operation was claimed again"))
            self._on_call.discard(op.operation_id)  # the new token goes out whole
            self._dropped.discard(op.operation_id)
            lease = None
        if lease is None:
            lease = Lease(self, op, lease_seconds, clock=self._clock)
            self._leases[op.operation_id] = lease
            self._wake.set()
            if self._keeper is None:
                self._keeper = asyncio.create_task(self._keep())
        await lease.answered_or_ended()
        if lease.lost:
            raise lease.error
        return lease

    def leave(self, lease: Lease) -> None:
        """Stop holding ``lease``: it is not extended from the next beat on."""
        if self._leases.get(lease.operation_id) is not lease:
            return
        del self._leases[lease.operation_id]
        if lease.operation_id in self._on_call:
            self._on_call.discard(lease.operation_id)
            self._dropped.add(lease.operation_id)
        self._wake.set()

    def beat_soon(self, *, now: bool = False) -> None:
        """New progress (sent when it is due) or a confirmation (``now``) to send."""
        self._urgent = self._urgent or now
        self._wake.set()

    async def close(self) -> None:
        """End the stream now; the leases it held are not extended any more."""
        if self._keeper is not None:
            self._keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keeper
        self._drop_call()

    # ---- the keeper ------------------------------------------------------------------------

    async def _keep(self) -> None:
        try:
            while True:
                while self._leases:
                    await self._until_due()
                    if self._leases:
                        await self._beat_or_reopen()
                if self._call is not None:
                    call, self._call = self._call, None
                    await call.close()
                if not self._leases:  # none joined while the call closed
                    return
        except Exception as error:  # a bug: the leases cannot be vouched for any more
            _log.warning("lease_stream_failed", code=type(error).__name__, held=self.held)
            self._lose(list(self._leases.values()), LeaseLost("the lease stream failed"))
        finally:
            self._keeper = None

    def _due(self) -> float:
        """When the next beat goes out: at once for a joining lease or a confirmation."""
        if self._urgent or any(operation_id not in self._on_call for operation_id in self._leases):
            return self._clock()
        leases = self._leases.values()
        due = self._last_beat + min(lease.interval for lease in leases)
        if any(lease.progress_due for lease in leases):
            due = min(due, self._last_beat + PROGRESS_BEAT_SECONDS)
        return due

    async def _until_due(self) -> None:
        while self._leases:
            self._wake.clear()
            wait = self._due() - self._clock()
            if wait <= 0:
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._wake.wait()

    async def _beat_or_reopen(self) -> None:
        try:
            try:
                await self._beat()
            except StreamBroken as broken:
                await self._reopen(broken)
        except DomainError as refused:  # the service refused the stream itself: nothing is held
            _log.warning("lease_stream_refused", code=refused.code, held=self.held)
            self._drop_call()
            self._lose(list(self._leases.values()), refused)

    def _drop_call(self) -> None:
        if self._call is not None:
            self._call.cancel()
            self._call = None

    async def _beat(self) -> None:
        if self._call is None:
            self._call = _Call(self._open_call(), self._cancels_pushed)
            self._on_call.clear()
            self._dropped.clear()
        beaten = dict(self._leases)
        entries = [
            lease.entry(added=operation_id not in self._on_call)
            for operation_id, lease in beaten.items()
        ]
        request = pb.HoldLeasesRequest(
            leases=[entry for entry in entries if entry is not None], dropped=sorted(self._dropped)
        )
        sent = self._clock()
        self._urgent = False
        self._dropped.clear()
        self._on_call.update(beaten)
        answer = await self._call.beat(request, timeout=self._answer_within(sent, beaten.values()))
        self._last_beat = sent
        gone: list[tuple[Lease, DomainError]] = []
        for outcome in answer.outcomes:
            lease = beaten.get(outcome.operation_id)
            if lease is None or self._leases.get(outcome.operation_id) is not lease:
                continue  # it left while the beat was on its way
            if outcome.status_code:
                error = domain_error_from_status(
                    outcome.status_code, outcome.error_code, outcome.message
                )
                gone.append((lease, error))
            else:
                lease.held(sent, cancel_requested=outcome.cancel_requested)
                if outcome.cancel_requested:
                    self.leave(lease)
        for lease, error in gone:
            self._on_call.discard(lease.operation_id)  # the service let go of it already
            self._lose([lease], error)

    def _answer_within(self, now: float, leases: Iterable[Lease]) -> float:
        """How long an answer may take: until the first of these leases runs out."""
        return max(min(lease.live_until for lease in leases) - now, 0.001)

    async def _reopen(self, broken: StreamBroken) -> None:
        """Reopen the stream while any lease is live; those that ran out meanwhile are lost."""
        _log.warning("heartbeat_stream_broken", reason=str(broken), held=self.held)
        delay = RECONNECT_FIRST_DELAY_SECONDS
        while True:
            self._drop_call()
            now = self._clock()
            ran_out = [lease for lease in self._leases.values() if lease.live_until <= now]
            self._lose(ran_out, LeaseLost("the lease stream stayed broken until the lease ran out"))
            if not self._leases:
                return
            try:
                await self._beat()
            except StreamBroken:
                soonest = min(lease.live_until for lease in self._leases.values())
                await asyncio.sleep(min(delay, max(soonest - self._clock(), 0)))
                delay = min(delay * 2, RECONNECT_MAX_DELAY_SECONDS)
                continue
            _log.info("heartbeat_stream_reopened", held=self.held)
            return

    def _cancels_pushed(self, outcomes: Iterable[Outcome]) -> None:
        for outcome in outcomes:
            lease = self._leases.get(outcome.operation_id)
            if lease is not None and outcome.cancel_requested:
                lease.cancelled()
                self.leave(lease)

    def _lose(self, leases: Iterable[Lease], error: DomainError) -> None:
        for lease in leases:
            self.leave(lease)
            _log.warning("lease_lost", **lease.log_fields(), code=error.code)
            lease.lose(error)


class Lease:
    """One claimed operation's lease, held on its worker's lease stream while the attempt runs."""

    def __init__(
        self,
        stream: LeaseStream,
        op: HeldOperation,
        lease_seconds: int,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stream = stream
        self._op = op
        self.lease_seconds = lease_seconds
        self.interval = lease_seconds / BEATS_PER_LEASE
        self._clock = clock
        self.cancel_requested = False
        self.lost = False
        self.error: DomainError = LeaseLost("the lease was lost")
        self.ended = asyncio.Event()
        self._answered = asyncio.Event()
        # Until its first answer, a lease is vouched for a third of a lease from its join:
        # its claim is at most that old (``heartbeat_after_seconds``), so it is surely live.
        self._held_until = clock() + self.interval
        self._progress = 0
        self._progress_sent = 0
        self._progress_in_flight = 0

    @property
    def operation_id(self) -> str:
        return self._op.operation_id

    @property
    def token(self) -> str:
        return self._op.lease_token

    @classmethod
    async def open(cls, holder: HoldsLeases, op: HeldOperation, lease_seconds: int) -> Lease:
        """Join the worker's lease stream and wait for the first answer; the error if refused."""
        return await holder.leases.hold(op, lease_seconds)

    def report_progress(self, percent: int) -> None:
        """The work's estimate, 0 to 99; sent on the next beat, at most about once a second."""
        percent = max(0, min(percent, PROGRESS_CEILING))
        if percent > self._progress:
            self._progress = percent
            self._stream.beat_soon()

    async def confirm(self) -> None:
        """Make sure the lease has at least two thirds of its window left, else beat now.

        Called before publishing: the stream normally guarantees it, unless the
        event loop or the service was slow.
        """
        if self.lost:
            raise self.error
        if self._held_until - self._clock() >= self.lease_seconds - self.interval:
            return
        self._answered.clear()
        self._stream.beat_soon(now=True)
        await self.answered_or_ended()
        if self.lost:
            raise self.error

    async def close(self) -> None:
        """Leave the lease stream; safe to call more than once."""
        self._stream.leave(self)

    # ---- what the stream tells it --------------------------------------------------------

    @property
    def live_until(self) -> float:
        """When the lease runs out by this worker's own reckoning."""
        return self._held_until

    @property
    def progress_due(self) -> bool:
        return self._progress > self._progress_sent

    def entry(self, *, added: bool) -> pb.HeldLease | None:
        """This lease in the next beat: all of it when added, else only new progress."""
        progressed = self._progress > self._progress_sent
        self._progress_in_flight = self._progress
        if added:
            entry = pb.HeldLease(
                operation_id=self._op.operation_id,
                owner_id=self._op.owner_id,
                lease_token=self._op.lease_token,
                lease_seconds=self.lease_seconds,
            )
        elif progressed:
            entry = pb.HeldLease(operation_id=self._op.operation_id)
        else:
            return None
        if progressed:
            entry.progress_percent = self._progress
        return entry

    def held(self, sent: float, *, cancel_requested: bool) -> None:
        """A beat sent at ``sent`` was answered: the lease runs a whole window from then."""
        self._held_until = sent + self.lease_seconds
        self._progress_sent = max(self._progress_sent, self._progress_in_flight)
        self._answered.set()
        if cancel_requested:
            self.cancelled()

    def cancelled(self) -> None:
        self.cancel_requested = True
        self.ended.set()

    def lose(self, error: DomainError) -> None:
        self.lost = True
        self.error = error
        self.ended.set()

    async def answered_or_ended(self) -> None:
        answered = asyncio.ensure_future(self._answered.wait())
        ended = asyncio.ensure_future(self.ended.wait())
        try:
            await asyncio.wait((answered, ended), return_when=asyncio.FIRST_COMPLETED)
        finally:
            answered.cancel()
            ended.cancel()

    def log_fields(self) -> dict[str, object]:
        return self._op.log_fields()
