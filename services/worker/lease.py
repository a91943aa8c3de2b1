"""One lease stream per worker holds the leases of all its running attempts (ADR 0026).

A joining lease goes out on a beat sent at once, whose answer says whether the
owner already cancelled; then the stream beats every third of its shortest
lease (two beats in every window), and about four times a second while
progress or answer text is new (``NEWS_BEAT_SECONDS``: a streaming answer costs
the database at most that many writes a second, however fast the model). The
service also pushes an owner's cancel as it commits. A lease is lost when an
answer refuses it, or when the stream stays broken until the lease runs out; a
broken stream (its replica restarted) reopens with the live leases. As in
Temporal, a failed heartbeat stops the work.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable
from typing import Protocol, TypeAlias

import grpc
import structlog

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.model.drafts import clipped
from durable_ops.model.errors import DomainError, LeaseLost, Unavailable
from durable_ops.model.progress import CEILING as PROGRESS_CEILING
from durable_ops.rpc.errors import domain_error_from_rpc, domain_error_from_status

BEATS_PER_LEASE = 3
NEWS_BEAT_SECONDS = 0.25  # new progress or answer text reaches the owner at most this often
CLOSE_TIMEOUT_SECONDS = 2.0
RECONNECT_FIRST_DELAY_SECONDS = 0.1
RECONNECT_MAX_DELAY_SECONDS = 2.0

HoldLeasesCall: TypeAlias = grpc.aio.StreamStreamCall[pb.HoldLeasesRequest, pb.HoldLeasesResponse]
Outcome = pb.HoldLeasesResponse.Outcome
_log = structlog.get_logger(__name__)


class HeldOperation(Protocol):  # a claimed attempt
    @property
    def operation_id(self) -> str: ...
    @property
    def owner_id(self) -> str: ...
    @property
    def lease_token(self) -> str: ...
    def log_fields(self) -> dict[str, object]: ...


class Leases(Protocol):
    """Where attempts hold their leases: the worker's ``LeaseStream``, or the in-memory
    stand-in of ``durable_ops.worker.testing``."""

    def join(self, op: HeldOperation, lease_seconds: int) -> Lease: ...
    def leave(self, lease: Lease) -> None: ...
    def beat_soon(self, *, now: bool = False) -> None: ...


async def wait_set(event: asyncio.Event, seconds: float) -> None:
    """Wait until ``event`` is set, ``seconds`` at most."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await event.wait()


class StreamBroken(Exception):
    """The stream failed in transit; the leases themselves may well be live."""


class _Call:
    """One open HoldLeases call: one beat at a time; a reader takes every message."""

    def __init__(
        self, call: HoldLeasesCall, on_pushed: Callable[[Iterable[Outcome]], None]
    ) -> None:
        self._call = call
        self._on_pushed = on_pushed
        # Answers in order, or what broke the stream (kept there for every later beat).
        self._answers: asyncio.Queue[pb.HoldLeasesResponse | BaseException] = asyncio.Queue()
        self._reader = asyncio.create_task(self._read())

    async def beat(self, request: pb.HoldLeasesRequest, timeout: float) -> pb.HoldLeasesResponse:
        """Send one beat and wait for its answer; ``StreamBroken`` or the refusal otherwise."""
        try:
            async with asyncio.timeout(timeout):
                await self._call.write(request)
                answer = await self._answers.get()
        except TimeoutError:
            raise StreamBroken("no answer to the beat in time") from None
        except (grpc.aio.UsageError, asyncio.InvalidStateError) as exc:
            raise StreamBroken("the call is closed") from exc
        except grpc.aio.AioRpcError as exc:
            raise _broken(exc) from exc
        if isinstance(answer, BaseException):
            self._answers.put_nowait(answer)
            raise answer
        return answer

    async def _read(self) -> None:
        try:
            while True:
                message = await self._call.read()
                if not isinstance(message, pb.HoldLeasesResponse):  # grpc.aio.EOF
                    self._answers.put_nowait(StreamBroken("the lease stream ended"))
                    return
                if message.pushed:
                    self._on_pushed(message.outcomes)
                else:
                    self._answers.put_nowait(message)
        except grpc.aio.AioRpcError as exc:
            self._answers.put_nowait(_broken(exc))

    async def close(self) -> None:
        """Half-close and let the reader drain, so the service ends the call cleanly
        (cancelling a task blocked in ``read`` would cancel the whole call)."""
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT_SECONDS):
                await self._call.done_writing()
                await self._reader
        except (grpc.aio.AioRpcError, TimeoutError, grpc.aio.UsageError, asyncio.CancelledError):
            self.cancel()

    def cancel(self) -> None:
        self._reader.cancel()
        self._call.cancel()


def _broken(error: grpc.aio.AioRpcError) -> Exception:
    """UNAVAILABLE, CANCELLED, INTERNAL, UNKNOWN: the replica or the network broke the
    stream (``StreamBroken``); any other status refuses it."""
    domain = domain_error_from_rpc(error)
    only_the_stream = isinstance(domain, Unavailable) or type(domain) is DomainError
    return StreamBroken(domain.code) if only_the_stream else domain


class LeaseStream:
    """The one HoldLeases stream of a worker, open while it holds leases."""

    def __init__(self, open_call: Callable[[], HoldLeasesCall]) -> None:
        self._open_call = open_call
        self._leases: dict[str, Lease] = {}  # held, in the order they joined
        self._on_call: set[Lease] = set()  # what the current call holds, as of its last beat
        self._call: _Call | None = None
        self._keeper: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._urgent = False  # a lease joined or asks to be confirmed: beat now
        self._last_beat = 0.0
        self._reconnect_delay: float | None = None  # while the stream is broken

    @property
    def held(self) -> int:
        return len(self._leases)

    def join(self, op: HeldOperation, lease_seconds: int) -> Lease:
        """The lease of ``op`` on the next beat (``Lease.ready`` waits for its answer);
        the same ``Lease`` while it is held under the same token."""
        lease = self._leases.get(op.operation_id)
        if lease is not None and lease.token == op.lease_token:
            return lease
        if lease is not None:  # claimed again since: the new token goes out whole
            self._end(lease, LeaseLost("the operation was claimed again"))
        lease = self._leases[op.operation_id] = Lease(self, op, lease_seconds)
        self.beat_soon(now=True)
        if self._keeper is None:
            self._keeper = asyncio.create_task(self._keep())
        return lease

    def leave(self, lease: Lease) -> None:
        """Stop holding ``lease``: it is not extended from the next beat on."""
        if self._leases.get(lease.operation_id) is lease:
            del self._leases[lease.operation_id]
            self._wake.set()

    def beat_soon(self, *, now: bool = False) -> None:
        """New progress (sent when it is due) or a lease to send at once (``now``)."""
        self._urgent = self._urgent or now
        self._wake.set()

    async def close(self) -> None:
        """End the stream now; the leases it held are not extended any more."""
        if self._keeper is not None:
            self._keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keeper
        self._drop_call()

    async def _keep(self) -> None:
        try:
            while self._leases:
                await self._until_due()
                if self._leases:
                    await self._beat_or_reopen()
                if not self._leases and self._call is not None:
                    call, self._call = self._call, None
                    await call.close()
        except Exception as error:  # a bug: the leases cannot be vouched for any more
            _log.warning("lease_stream_failed", code=type(error).__name__, held=self.held)
            self._end_all(LeaseLost("the lease stream failed"))
        finally:
            self._keeper = None

    async def _until_due(self) -> None:
        while self._leases and not self._urgent:
            self._wake.clear()
            leases = self._leases.values()
            due = self._last_beat + min(lease.interval for lease in leases)
            if any(lease.news_due for lease in leases):
                due = min(due, self._last_beat + NEWS_BEAT_SECONDS)
            if due <= time.monotonic():
                return
            await wait_set(self._wake, due - time.monotonic())

    async def _beat_or_reopen(self) -> None:
        """One beat; if the stream broke, the leases that ran out are lost and the rest go
        out on a new call, at once the first time, then after a growing pause."""
        try:
            await self._beat()
        except StreamBroken as broken:
            self._drop_call()
            now = time.monotonic()
            for lease in [lease for lease in self._leases.values() if lease.live_until <= now]:
                self._end(lease, LeaseLost("the lease stream stayed broken until it ran out"))
            self._urgent = True
            if self._reconnect_delay is None:
                _log.warning("heartbeat_stream_broken", reason=str(broken), held=self.held)
                self._reconnect_delay = RECONNECT_FIRST_DELAY_SECONDS
            elif self._leases:
                soonest = min(lease.live_until for lease in self._leases.values())
                await asyncio.sleep(min(self._reconnect_delay, soonest - now))
                self._reconnect_delay = min(2 * self._reconnect_delay, RECONNECT_MAX_DELAY_SECONDS)
        except DomainError as refused:  # the service refused the stream itself: nothing is held
            _log.warning("lease_stream_refused", code=refused.code, held=self.held)
            self._drop_call()
            self._end_all(refused)
        else:
            if self._reconnect_delay is not None:
                _log.info("heartbeat_stream_reopened", held=self.held)
                self._reconnect_delay = None

    def _drop_call(self) -> None:
        if self._call is not None:
            self._call.cancel()
            self._call = None

    async def _beat(self) -> None:
        if self._call is None:
            self._call = _Call(self._open_call(), self._cancels_pushed)
            self._on_call = set()
        call, beaten, on_call = self._call, dict(self._leases), self._on_call
        # A lease the call does not hold goes out whole (a claimed-again one too, its token
        # new); an operation none of the leases holds any more is dropped.
        entries = [lease.entry(added=lease not in on_call) for lease in beaten.values()]
        request = pb.HoldLeasesRequest(
            leases=[entry for entry in entries if entry is not None],
            dropped=sorted({lease.operation_id for lease in on_call} - beaten.keys()),
        )
        sent, self._urgent = time.monotonic(), False
        self._on_call = set(beaten.values())
        # The answer may take until the first of these leases runs out.
        timeout = max(min(lease.live_until for lease in beaten.values()) - sent, 0.001)
        answer = await call.beat(request, timeout)
        self._last_beat = sent
        for outcome in answer.outcomes:
            answered = beaten.get(outcome.operation_id)
            if answered is None or self._leases.get(outcome.operation_id) is not answered:
                continue  # it left while the beat was on its way
            if outcome.status_code:
                self._on_call.discard(answered)  # the service let go of it already
                status = (outcome.status_code, outcome.error_code, outcome.message)
                self._end(answered, domain_error_from_status(*status))
                continue
            answered.held(sent)
            if outcome.cancel_requested:
                self._end(answered, None)

    def _cancels_pushed(self, outcomes: Iterable[Outcome]) -> None:
        for outcome in outcomes:
            lease = self._leases.get(outcome.operation_id)
            if lease is not None and outcome.cancel_requested:
                self._end(lease, None)

    def _end(self, lease: Lease, error: DomainError | None) -> None:
        """``lease`` leaves: lost with ``error``, or (``None``) the owner asked to cancel."""
        self.leave(lease)
        if error is not None:
            _log.warning("lease_lost", **lease.log_fields(), code=error.code)
        lease.end(error)

    def _end_all(self, error: DomainError) -> None:
        for lease in list(self._leases.values()):
            self._end(lease, error)


class Lease:
    """One attempt's lease on its worker's stream; ``ended`` once its owner asked to cancel
    (``cancel_requested``) or it is lost (``error``)."""

    def __init__(self, stream: Leases, op: HeldOperation, lease_seconds: int) -> None:
        self._stream = stream
        self._op = op
        self.token = op.lease_token
        self.lease_seconds = lease_seconds
        self.interval = lease_seconds / BEATS_PER_LEASE
        self.cancel_requested = False
        self.error: DomainError | None = None
        self.ended = asyncio.Event()
        self.answered = asyncio.Event()
        # When it runs out by this worker's reckoning. Until the first answer, a third of a
        # lease from its join: its claim is at most a second old, so it is surely live.
        self.live_until = time.monotonic() + self.interval
        self._progress = 0
        self._progress_sent = 0
        self._text = ""  # the answer so far, as the next beat carries it
        self._text_sent = ""

    @property
    def operation_id(self) -> str:
        return self._op.operation_id

    @property
    def lost(self) -> bool:
        return self.error is not None

    @property
    def news_due(self) -> bool:
        return self._progress > self._progress_sent or self._text != self._text_sent

    async def ready(self) -> Lease:
        """This lease once a beat answered for it (or its owner cancelled); its error if lost."""
        await self.answered.wait()
        if self.error is not None:
            raise self.error
        return self

    def report_progress(self, percent: int) -> None:
        """The work's estimate, 0 to 99; sent on the next beat, at most about once a second."""
        percent = max(0, min(percent, PROGRESS_CEILING))
        if percent > self._progress:
            self._progress = percent
            self._stream.beat_soon()

    def report_text(self, text: str) -> None:
        """The answer so far (its owner's content: never logged), sent whole on a coming beat,
        at most about four times a second, cut to the answer budget's bytes."""
        text = clipped(text)
        if text != self._text:
            self._text = text
            self._stream.beat_soon()

    async def confirm(self) -> None:
        """Before publishing: beat now unless two thirds of the window are left (the stream
        keeps them, unless the event loop or the service was slow)."""
        left = self.live_until - time.monotonic()
        if left < self.lease_seconds - self.interval and not self.ended.is_set():
            self.answered.clear()
            self._stream.beat_soon(now=True)
        await self.ready()

    async def close(self) -> None:
        """Leave the lease stream; safe to call more than once."""
        self._stream.leave(self)

    def entry(self, *, added: bool) -> pb.HeldLease | None:
        """This lease in the next beat: all of it when added, else only what is new."""
        if not added and not self.news_due:
            return None
        entry = pb.HeldLease(operation_id=self._op.operation_id)
        if added:
            entry.owner_id, entry.lease_token = self._op.owner_id, self.token
            entry.lease_seconds = self.lease_seconds
        if self._progress:  # an added lease carries it again: a broken call may have lost it
            entry.progress_percent = self._progress_sent = self._progress
        if self._text and (added or self._text != self._text_sent):
            entry.answer_text = self._text_sent = self._text
        return entry

    def end(self, error: DomainError | None) -> None:
        """Lost with ``error``, or (``None``) its owner asked to cancel; called by its stream."""
        self.error, self.cancel_requested = error, error is None
        self.ended.set()
        self.answered.set()  # nothing waits for an answer that will not come

    def held(self, sent: float) -> None:
        """A beat sent at ``sent`` was answered: the lease runs a whole window from then."""
        self.live_until = sent + self.lease_seconds
        self.answered.set()

    def log_fields(self) -> dict[str, object]:
        return self._op.log_fields()
