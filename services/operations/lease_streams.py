"""The two lease streams: ``Heartbeat`` (one lease, the owner's scope) and ``HoldLeases``
(every lease of one worker, the neutral scope, each lease naming its owner).

Both answer every beat in order and also speak first when the lease holder's
owner cancels between two beats (``operations.watch``, woken at once by a
cancel this process commits, else by its shared poll): the holder learns of a cancel
once, either pushed or in the answer to a beat. When the cancel lands between two
beats, ``BeatReader.next`` returns ``PUSHED`` and the read it had started stays
pending for the next call, so no beat is lost or read twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import closing
from dataclasses import replace
from typing import Final, Generic, TypeVar

import structlog

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.model import held_leases
from durable_ops.model.errors import DomainError, InvalidArgument
from durable_ops.model.held_leases import HeldLease, HeldLeases
from durable_ops.operations.app import OperationsApp
from durable_ops.operations.watch import CANCEL, Watch
from durable_ops.rpc.errors import status_for
from durable_ops.storage.operations import Version
from durable_ops.wire import operations as convert

log = structlog.get_logger(__name__)
Beat = TypeVar("Beat")
Outcome = pb.HoldLeasesResponse.Outcome


class Pushed:
    """What ``BeatReader.next`` answers when the cancel came before the next beat."""


PUSHED: Final = Pushed()


class BeatReader(Generic[Beat]):
    """The requests of one lease stream, read while also waiting for a pushed cancel."""

    def __init__(self, requests: AsyncIterator[Beat]) -> None:
        self._requests = requests
        self._pending: asyncio.Future[Beat | None] | None = None

    async def next(self, unless: asyncio.Event | None = None) -> Beat | Pushed | None:
        """The next beat; ``None`` at the end of the stream; ``PUSHED`` once ``unless`` is set."""
        if self._pending is None:
            self._pending = asyncio.ensure_future(anext(self._requests, None))
        if unless is not None and not self._pending.done():
            stop: asyncio.Future[object] = asyncio.ensure_future(unless.wait())
            try:
                await asyncio.wait((self._pending, stop), return_when=asyncio.FIRST_COMPLETED)
            finally:
                stop.cancel()
            if not self._pending.done():
                return PUSHED
        beat, self._pending = await self._pending, None
        return beat

    def close(self) -> None:
        if self._pending is not None:
            self._pending.cancel()


async def heartbeat(
    app: OperationsApp, owner: str, requests: AsyncIterator[pb.HeartbeatRequest]
) -> AsyncIterator[pb.HeartbeatResponse]:
    """One lease, named by the first beat; a later beat may leave it out or repeat it."""
    with closing(BeatReader(requests)) as beats, app.watch.watching(CANCEL) as cancelled:
        first = await beats.next()
        if not isinstance(first, pb.HeartbeatRequest):
            return
        operation_id, token = first.operation_id, first.lease_token
        if not operation_id or not token:
            raise InvalidArgument("lease_token", "the first heartbeat names the lease")
        lease = HeldLease(
            operation_id, owner, token, first.lease_seconds or held_leases.DEFAULT_LEASE_SECONDS
        )
        reply = await _beat(app, lease, first)
        log.info("lease_stream_opened", operation_id=operation_id, owner=owner)
        yield reply
        pushed = reply.cancel_requested  # the holder knows already
        cancelled.add(operation_id)
        while True:
            beat = await beats.next(unless=None if pushed else cancelled.event)
            if beat is None:
                return
            if isinstance(beat, Pushed):
                pushed = True
                log.info("cancel_pushed", operation_id=operation_id, owner=owner)
                yield pb.HeartbeatResponse(cancel_requested=True, pushed=True)
                continue
            if beat.operation_id not in ("", operation_id) or beat.lease_token not in ("", token):
                raise InvalidArgument("operation_id", "one stream heartbeats one lease")
            lease = replace(lease, lease_seconds=beat.lease_seconds or lease.lease_seconds)
            reply = await _beat(app, lease, beat)
            pushed = pushed or reply.cancel_requested
            yield reply


async def _beat(
    app: OperationsApp, lease: HeldLease, beat: pb.HeartbeatRequest
) -> pb.HeartbeatResponse:
    progress = beat.progress_percent if beat.HasField("progress_percent") else None
    expires, cancel_requested = await app.beat(replace(lease, progress=progress))
    return pb.HeartbeatResponse(
        lease_expires_at=convert.timestamp(expires), cancel_requested=cancel_requested
    )


async def hold_leases(
    app: OperationsApp, requests: AsyncIterator[pb.HoldLeasesRequest]
) -> AsyncIterator[pb.HoldLeasesResponse]:
    """Every lease one worker holds, extended by one transaction per beat."""
    held = HeldLeases()
    with closing(BeatReader(requests)) as beats, app.watch.watching(CANCEL) as cancels:
        while True:
            request = await beats.next(unless=cancels.event)
            if request is None:
                return
            if isinstance(request, Pushed):
                outcomes = []
                for operation_id in sorted(cancels.take() & {lease.operation_id for lease in held}):
                    log.info("cancel_pushed", operation_id=operation_id)
                    outcomes.append(Outcome(operation_id=operation_id, cancel_requested=True))
                if outcomes:
                    yield pb.HoldLeasesResponse(outcomes=outcomes, pushed=True)
                continue
            yield await _hold(app, held, request, cancels)


async def _hold(
    app: OperationsApp, held: HeldLeases, request: pb.HoldLeasesRequest, cancels: Watch[Version]
) -> pb.HoldLeasesResponse:
    """One beat: every lease the stream holds extended by one transaction, each
    answered alone; a lost or refused one leaves the stream and its cancel watch."""
    beat = held.apply(_entries(request), request.dropped)
    added = {lease.operation_id for lease in request.leases if lease.lease_token}
    outcomes = [_refusal(operation_id, error) for operation_id, error in beat.refused.items()]
    # A dropped or refused lease is no longer watched, and a new one is watched afresh.
    for operation_id in {*request.dropped, *beat.refused, *added}:
        cancels.discard(operation_id)
    answers = await app.extend(beat.held)
    for lease, answer in zip(beat.held, answers, strict=True):
        if isinstance(answer, DomainError):
            held.lose(lease.operation_id)
            cancels.discard(lease.operation_id)
            outcomes.append(_refusal(lease.operation_id, answer))
            continue
        expires, cancel_requested = answer
        if cancel_requested:  # the holder learns it here: no push after this answer
            cancels.discard(lease.operation_id)
        elif not cancels.woken(lease.operation_id):
            cancels.add(lease.operation_id)
        if lease.operation_id in added:
            log.info("lease_stream_opened", operation_id=lease.operation_id, owner=lease.owner_id)
        outcomes.append(
            Outcome(
                operation_id=lease.operation_id,
                lease_expires_at=convert.timestamp(expires),
                cancel_requested=cancel_requested,
            )
        )
    return pb.HoldLeasesResponse(outcomes=outcomes)


def _entries(request: pb.HoldLeasesRequest) -> list[held_leases.Entry]:
    return [
        held_leases.Entry(
            operation_id=lease.operation_id,
            owner_id=lease.owner_id,
            token=lease.lease_token,
            lease_seconds=lease.lease_seconds,
            progress=lease.progress_percent if lease.HasField("progress_percent") else None,
            answer_text=lease.answer_text if lease.HasField("answer_text") else None,
        )
        for lease in request.leases
    ]


def _refusal(operation_id: str, error: DomainError) -> Outcome:
    return Outcome(
        operation_id=operation_id,
        status_code=status_for(error).value[0],
        error_code=error.code,
        message=error.message,
    )
