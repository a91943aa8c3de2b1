"""``GET /api/events``: one server-sent event stream per tab, of the caller's own changes.

Each event says what changed, as the page shows it:

* ``operation``: an operation of the caller's (as ``/api/operations/{id}``),
  and while its attempt runs, the fields of its answer written so far
  (``draft``: the attempt and ``partial``, ``partial.fields_so_far``);
* ``unread``: the unread notification count, when the stream opens, when an
  operation ends or is retried (its notification comes or goes) and when a tab
  of this gateway marks or dismisses one; a slow refresh catches the rest;
* ``signed_out``: the last event of a stream whose credential stopped standing
  (logout, ``opsctl sessions revoke``, expiry). The stream asks again whether it
  stands before it sends anything a second or more after it last asked, at every
  keepalive, and at once when a session of the user ends through this gateway: no
  change leaves more than a second after the sign-in ended (SPEC §2, "end it at once").

A stream ends, with no last event, as the gateway's stop begins (``stopping``):
the browser's EventSource reconnects after ``RECONNECT_MILLISECONDS`` with the
last id it got, to the gateway that replaces this one, and misses nothing.

The operation events come from the Operations service's ``WatchOwner`` (one
call per stream, in the caller's owner scope: another owner's change cannot
reach it), which resumes from the ``Last-Event-ID`` a reconnecting browser
sends, on any replica (ADR 36). The id is read
strictly: anything this service did not give is 400 ``bad_event_id``. A user
holds at most OPS_GATEWAY_LONG_POLLS_PER_USER streams and long-polls together;
one more gets 429 ``too_many_waits`` with ``Retry-After``. A page's stream names the user
the page was rendered for (``page_user``): another than the credential's is 409
``page_user_changed`` (``auth.check_page_user``), so a tab kept open across a sign-in as
someone else never gets their changes.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import grpc
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from durable_ops.api.notifications.v1 import notifications_pb2 as notifications_pb
from durable_ops.api.notifications.v1 import notifications_pb2_grpc as notifications_grpc
from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.api.operations.v1 import operations_pb2_grpc as pb_grpc
from durable_ops.gateway import dto
from durable_ops.gateway.auth import PAGE_USER_PARAMETER, check_page_user, still_signed_in
from durable_ops.gateway.backends import translate
from durable_ops.gateway.calls import OwnerCalls, owner_calls, stub_for
from durable_ops.gateway.context import draining_of, long_polls_of
from durable_ops.gateway.limits import LimitExceeded
from durable_ops.gateway.openapi import endpoint, errors, query
from durable_ops.gateway.pagination import query_params
from durable_ops.gateway.partial import fields_so_far
from durable_ops.gateway.problems import invalid, one_header, too_many_waits
from durable_ops.gateway.stopping import Draining
from durable_ops.model.errors import InvalidArgument, Unavailable
from durable_ops.model.event_ids import event_id, event_time

PATH = "/api/events"
LAST_EVENT_ID = "Last-Event-ID"
KEEPALIVE_SECONDS = 15.0  # a comment line: proxies keep the stream, a gone client is noticed
UNREAD_REFRESH_SECONDS = 30.0  # marks made through another gateway replica
RECONNECT_MILLISECONDS = 2000  # the browser's pause before it reconnects with Last-Event-ID
# A running stream asks whether its credential still stands before it sends what it got
# this long after it last asked: a Workspace read a second at most, however busy.
RECHECK_SECONDS = 1.0
# An operation entering one of these may have gained a notification (it ended) or lost one
# (a retry queues it again): the unread count is read again.
NOTICE_STATES = {"succeeded", "failed", "cancelled", "queued"}

_notifications = stub_for("notifications", notifications_grpc.NotificationsServiceStub)


@dataclass(eq=False)
class Heard:
    """What one stream was told since it last looked; ``woken`` when anything was."""

    woken: asyncio.Event = field(default_factory=asyncio.Event)
    unread: bool = False  # a tab changed a notification, or an operation ended
    session_ended: bool = False  # a session of the user ended through this gateway

    def mark_unread(self) -> None:
        self.unread = True
        self.woken.set()

    def take(self) -> tuple[bool, bool]:
        """(unread, session_ended), cleared."""
        self.woken.clear()
        taken = (self.unread, self.session_ended)
        self.unread = self.session_ended = False
        return taken


class StreamSignals:
    """The streams of each user in this process, told when a tab changed a notification
    or a session of the user ended."""

    def __init__(self) -> None:
        self._streams: dict[str, set[Heard]] = {}

    @contextmanager
    def listening(self, user_id: str) -> Iterator[Heard]:
        heard = Heard()
        self._streams.setdefault(user_id, set()).add(heard)
        try:
            yield heard
        finally:
            streams = self._streams.get(user_id, set())
            streams.discard(heard)
            if not streams:
                self._streams.pop(user_id, None)

    def unread_changed(self, user_id: str) -> None:
        for heard in self._streams.get(user_id, ()):
            heard.mark_unread()

    def session_ended(self, user_id: str) -> None:
        for heard in self._streams.get(user_id, ()):
            heard.session_ended = True
            heard.woken.set()


def stream_signals_of(request: Request) -> StreamSignals:
    signals: StreamSignals = request.app.state.stream_signals
    return signals


class Standing:
    """Whether a stream's credential still stands: asked again when ``RECHECK_SECONDS``
    have passed since it was last asked, or at once when told to."""

    def __init__(self, ask: Callable[[], Awaitable[bool]], clock: Callable[[], float]) -> None:
        self._ask = ask
        self._clock = clock
        self._asked_at = clock()  # the stream opened on a credential just checked

    async def holds(self, *, now: bool = False) -> bool:
        """Raises ``Unavailable`` when the Workspace cannot say."""
        if not now and self._clock() - self._asked_at < RECHECK_SECONDS:
            return True
        self._asked_at = self._clock()
        return await self._ask()


def frame(event: str, data: Mapping[str, Any], event_id: str | None = None) -> str:
    """One server-sent event; ``data`` is one line of JSON (it never holds a raw newline)."""
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


def operation_event(change: pb.OwnerChange, n: int) -> str:
    """The change as the stream's ``n``-th operation event: its id keeps the time the
    replica gave (where a resumed stream reads on) and counts this stream's events."""
    draft = None
    if change.HasField("draft"):
        draft = {"attempt": change.draft.attempt, "partial": fields_so_far(change.draft.text)}
    body = {"operation": dto.operation(change.operation), "draft": draft}
    return frame("operation", body, event_id(event_time(change.event_id), n))


def _after(request: Request) -> str:
    """The ``Last-Event-ID`` a reconnecting browser sent, checked; "" when none."""
    value = one_header(request, LAST_EVENT_ID) or ""
    if value:
        try:
            event_time(value, field="Last-Event-ID")
        except InvalidArgument as exc:
            raise invalid("Last-Event-ID", exc.reason, code=exc.code) from None
    return value


async def events(request: Request) -> Response:
    calls = await owner_calls(request)
    params = query_params(request, (PAGE_USER_PARAMETER,))
    check_page_user(calls.user, params.get(PAGE_USER_PARAMETER))
    after = _after(request)
    await calls.stands()  # before a stream slot is taken: a refused stream never holds one
    slot = ExitStack()
    try:
        slot.enter_context(long_polls_of(request).hold(calls.user.id))
    except LimitExceeded as exc:
        raise too_many_waits(
            exc.retry_after,
            "you have too many event streams and waits open at once; close a tab or try again",
        ) from None
    signals = stream_signals_of(request)
    standing = Standing(lambda: still_signed_in(request, calls.user), _monotonic)
    return StreamingResponse(
        _stream(calls, after, signals, standing, draining_of(request)),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        background=BackgroundTask(slot.close),
    )


def _monotonic() -> float:
    return asyncio.get_running_loop().time()


async def _stream(
    calls: OwnerCalls,
    after: str,
    signals: StreamSignals,
    standing: Standing,
    draining: Draining,
) -> AsyncIterator[str]:
    """Operation events as the replicas' WatchOwner calls yield them, the unread count
    when it may have changed, and a keepalive comment when all is quiet; each sent only
    while the credential stands (``Standing``), else ``signed_out`` ends the stream.
    The gateway's stop ends it as it begins (``draining``).

    One watch per Operations replica the target lists: the replica that commits a change
    (the one holding a streaming answer's lease) pushes it at once, where another replica
    would find it only by its shared poll (figure 12: token → page p95 ≤ 250 ms through
    any replica). The stream goes on while one watch does."""
    yield f"retry: {RECONNECT_MILLISECONDS}\n\n"
    request = pb.WatchOwnerRequest(after=after)
    metadata = calls.backends.metadata(calls.user.id)
    watches = [
        calls.stub("operations", pb_grpc.OperationsServiceStub, target).WatchOwner(
            request, metadata=metadata
        )
        for target in await calls.backends.replicas("operations")
    ]
    changes: asyncio.Queue[pb.OwnerChange | BaseException] = asyncio.Queue()
    readers = [asyncio.ensure_future(_read(watch, changes.put_nowait)) for watch in watches]
    watching = len(watches)
    sent = SentChanges()
    sent_count = 0
    unread: int | None = None
    clock = asyncio.get_running_loop().time
    counted_at = -UNREAD_REFRESH_SECONDS  # the count as the stream opens
    got: pb.OwnerChange | BaseException | None = None
    try:
        with signals.listening(calls.user.id) as heard, draining.watching() as stopping:
            while True:
                if stopping.is_set():
                    return  # what was not sent yet, the reconnected stream sends
                recount, session_ended = heard.take()
                try:
                    stands = await standing.holds(now=session_ended)
                except Unavailable:
                    return  # the Workspace cannot say: the browser's reconnect asks again
                if not stands:
                    yield frame("signed_out", {})
                    return
                if recount or clock() - counted_at >= UNREAD_REFRESH_SECONDS:
                    counted_at = clock()
                    count = await _unread(calls)
                    # After a change, sent even when it is the count this stream sent last:
                    # the page may have shown another since (its own read after a retry),
                    # which this stream never saw when the change it missed was brief.
                    if count is not None and (recount or count != unread):
                        unread = count
                        yield frame("unread", {"unread": count})
                if isinstance(got, BaseException):
                    watching -= 1
                    if not watching:
                        raise got
                elif got is not None and sent.to_send(got):
                    yield operation_event(got, sent_count)
                    sent_count += 1
                    if dto.state_name(got.operation.state) in NOTICE_STATES:
                        heard.mark_unread()
                got = None
                if heard.woken.is_set():
                    continue  # told something already (by this very turn, say): look at once
                got = await _next(changes, heard.woken, stopping)
                if got is None and not stopping.is_set():
                    yield ": keepalive\n\n"
    finally:
        for reader in readers:
            reader.cancel()
        for watch in watches:
            watch.cancel()


class SentChanges:
    """Which versions of each operation a stream sent, so that of the changes every
    replica's watch reports, each goes to the page once and a late one does not undo a
    newer one.

    A version is the operation as read (``updated_at`` included) with its draft. A
    version never sent goes out (a replica's clock may stamp a newer change earlier,
    so stamps alone cannot rank it); one sent before goes out again only when it is
    newer than the last one sent, which heals a page that a late read had set back.

    An operation no watch reported for ``FORGET_SECONDS`` is forgotten: a watch reads
    again only ``WATCH_OVERLAP`` (2 s) behind its cursor, so nothing reports it late
    after that, and a stream held for days keeps what its last minute sent, not every
    operation it ever saw (the soak's gateway grew 0.3 MiB a minute with six streams)."""

    REMEMBERED = 16  # versions per operation: a replica's poll lags by a few at most
    FORGET_SECONDS = 60.0

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        # By operation, the least recently reported first.
        self._sent: OrderedDict[str, _Sent] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sent)

    def to_send(self, change: pb.OwnerChange) -> bool:
        """Whether ``change`` is to be sent (and it is then remembered as sent)."""
        now = self._clock()
        self._forget(now - self.FORGET_SECONDS)
        operation = change.operation
        stamp = (operation.updated_at.seconds, operation.updated_at.nanos)
        key = _version(change)
        sent = self._sent.pop(operation.id, None) or _Sent(OrderedDict(), stamp, now)
        self._sent[operation.id] = sent
        sent.reported_at = now
        if key in sent.versions and stamp <= sent.last:
            return False
        sent.versions[key] = stamp
        sent.versions.move_to_end(key)
        while len(sent.versions) > self.REMEMBERED:
            sent.versions.popitem(last=False)
        sent.last = stamp
        return True

    def _forget(self, before: float) -> None:
        while self._sent:
            oldest = next(iter(self._sent.values()))
            if oldest.reported_at >= before:
                return
            self._sent.popitem(last=False)


@dataclass
class _Sent:
    versions: OrderedDict[bytes, tuple[int, int]]  # sent, the most recent last
    last: tuple[int, int]  # the stamp of the last version sent
    reported_at: float  # when a watch last reported the operation


def _version(change: pb.OwnerChange) -> bytes:
    """The operation and its draft as read, without the event id each replica numbers."""
    hashed = hashlib.blake2b(change.operation.SerializeToString(deterministic=True), digest_size=16)
    if change.HasField("draft"):
        hashed.update(change.draft.SerializeToString(deterministic=True))
    return hashed.digest()


async def _read(
    watch: grpc.aio.UnaryStreamCall[pb.WatchOwnerRequest, pb.OwnerChange],
    put: Callable[[pb.OwnerChange | BaseException], None],
) -> None:
    try:
        async for change in watch:
            put(change)
        put(ConnectionError("the watch ended"))
    except grpc.aio.AioRpcError as exc:
        put(translate(exc))


async def _next(
    changes: asyncio.Queue[pb.OwnerChange | BaseException], *wakers: asyncio.Event
) -> pb.OwnerChange | BaseException | None:
    """The next change; None after a quiet ``KEEPALIVE_SECONDS`` or once a waker is set."""
    if not changes.empty():
        return changes.get_nowait()
    got = asyncio.ensure_future(changes.get())
    waking = [asyncio.ensure_future(waker.wait()) for waker in wakers]
    try:
        await asyncio.wait(
            (got, *waking), timeout=KEEPALIVE_SECONDS, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        for waiter in waking:
            waiter.cancel()
        if not got.done():
            got.cancel()
    return got.result() if got.done() and not got.cancelled() else None


async def _unread(calls: OwnerCalls) -> int | None:
    """The unread count; None while Notifications cannot say (the operation events go on,
    the bell keeps its last count and its own poll)."""
    try:
        reply = await calls(
            _notifications(calls).GetUnreadCount, notifications_pb.GetUnreadCountRequest()
        )
    except Unavailable:  # down, or no answer in time (``deadline_exceeded``)
        return None
    return reply.count


routes: Sequence[BaseRoute] = [Route(PATH, events, methods=["GET"])]

openapi_paths: Mapping[str, Mapping[str, Any]] = {
    PATH: {
        "get": endpoint(
            "The caller's changes as server-sent events (operation, unread), resumable",
            "streamEvents",
            "operations",
            {
                "200": {
                    "description": "an event stream: `operation` events carry an id, "
                    "`unread` events the unread notification count",
                    "content": {"text/event-stream": {"schema": {"type": "string"}}},
                },
                **errors(400, 429, 503),
            },
            parameters=[
                query(
                    PAGE_USER_PARAMETER,
                    {"type": "string"},
                    "the user the page was rendered for (the web UI's; an EventSource sends"
                    " no `X-Ops-Page-User` header): another than the credential's is 409"
                    " `page_user_changed`",
                ),
                {
                    "name": "Last-Event-ID",
                    "in": "header",
                    "required": False,
                    "schema": {"type": "string", "pattern": "^[0-9]{1,18}-[0-9]{1,9}$"},
                    "description": "the last id received: the stream resumes after it",
                },
            ],
        )
    }
}

openapi_schemas: Mapping[str, Any] = {}
