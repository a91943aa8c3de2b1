"""``GET /api/events`` (issue 39, point 2) through a live gateway and the real services, on
both engines.

A stream carries the caller's own operation changes (state, progress, the
answer so far as its fields) and the unread count; another owner's never
arrive. It resumes from ``Last-Event-ID``; a hostile one is 400
``bad_event_id``; the streams of one user are bounded with the long-polls.
Timeouts only keep a broken build from hanging.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from durable_ops import cli
from durable_ops.api.notifications.v1 import notifications_pb2 as npb
from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.gateway import events as events_route
from durable_ops.gateway.app import create_app
from durable_ops.gateway.backends import Backends
from durable_ops.model import event_ids
from durable_ops.model.scope import Role
from durable_ops.operations.tuning import Tuning
from tests.support.clock import ManualClock
from tests.support.gateway import (
    LiveGateway,
    bearer,
    claim,
    complete,
    create_operation,
    gateway_client,
    gateway_settings,
    make_app,
    run,
    sign_in,
)
from tests.support.grpc_services import Services, metadata, running_services
from tests.support.operations_client import Lease, OpsClient
from tests.support.ports import refusing_port
from tests.support.workspace_client import JOB_TEXT, entitle

HANG_GUARD = 10.0
JOB = {"title": "Engineer", "company": "Acme", "description": JOB_TEXT}
EVENT_ID = re.compile(r"[0-9]{1,18}-[0-9]{1,9}")


@pytest.fixture
def services(db_url: str) -> Iterator[Services]:
    with running_services(db_url, ManualClock()) as running:
        yield running


@pytest.fixture
def gateway(services: Services) -> Iterator[LiveGateway]:
    settings = gateway_settings(services.target)
    with LiveGateway(create_app(settings, Backends.from_settings(settings))) as live:
        yield live


class Events:
    """One open event stream: its events, parsed, as they come."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self._lines = response.aiter_lines()

    async def next(self) -> dict[str, Any]:
        """The next event: ``event``, ``data`` (parsed) and ``id`` when it has one."""
        event: dict[str, Any] = {}
        async with asyncio.timeout(HANG_GUARD):
            async for line in self._lines:
                if not line:
                    if "event" in event:
                        return event
                    event = {}
                    continue
                name, _, value = line.partition(": ")
                if name == "data":
                    event["data"] = json.loads(value)
                elif name in ("event", "id"):
                    event[name] = value
        raise AssertionError("the stream ended")

    async def until(self, wanted: Any) -> dict[str, Any]:
        """Events up to the first operation event ``wanted`` accepts (the others are kept)."""
        self.seen: list[dict[str, Any]] = getattr(self, "seen", [])
        while True:
            event = await self.next()
            self.seen.append(event)
            if event["event"] == "operation" and wanted(event["data"]):
                return event


@asynccontextmanager
async def events(
    client: httpx.AsyncClient, user: str, last_event_id: str | None = None
) -> AsyncIterator[Events]:
    headers = bearer(user)
    if last_event_id is not None:
        headers["Last-Event-ID"] = last_event_id
    async with client.stream("GET", "/api/events", headers=headers) as response:
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        yield Events(response)


def _lease(services: Services, claimed: Any) -> Lease:
    operation = OpsClient(services).get(claimed.owner, claimed.operation_id)
    return Lease(operation, claimed.owner, claimed.lease_token)


def test_a_stream_carries_the_owners_changes_with_the_answer_so_far_and_no_one_elses(
    services: Services, gateway: LiveGateway
) -> None:
    ops = OpsClient(services)

    async def scenario() -> None:
        async with (
            httpx.AsyncClient(base_url=gateway.url, timeout=HANG_GUARD) as client,
            events(client, "alice") as alices,
            events(client, "bob") as bobs,
        ):
            first = await alices.next()
            assert (first["event"], first["data"]) == ("unread", {"unread": 0})
            bobs_own = create_operation(services, "bob", key="bobs", task_type="cv.review")
            created = create_operation(services, "alice", key="alices")
            claimed = claim(services, ["strategy.snapshot"])
            stream = ops.lease_stream()
            stream.beat((_lease(services, claimed),))

            stream.send(
                pb.HoldLeasesRequest(
                    leases=[
                        pb.HeldLease(
                            operation_id=created.id,
                            answer_text='{"summary": "Strong fit", "strengths": ["Pyth',
                        )
                    ]
                )
            )
            stream.read()
            drafted = await alices.until(lambda data: data["draft"] is not None)
            assert drafted["data"]["operation"]["id"] == created.id
            assert drafted["data"]["operation"]["state"] == "running"
            assert drafted["data"]["draft"] == {
                "attempt": 1,
                "partial": {"summary": "Strong fit", "strengths": ["Pyth"]},
            }
            complete(services, claimed)
            done = await alices.until(lambda data: data["operation"]["state"] == "succeeded")
            assert done["data"]["draft"] is None
            unread = await alices.next()
            assert (unread["event"], unread["data"]) == ("unread", {"unread": 1})
            stream.close()

            ids = [event["id"] for event in alices.seen if event["event"] == "operation"]
            assert all(EVENT_ID.fullmatch(event_id) for event_id in ids)
            assert [int(i.split("-")[1]) for i in ids] == sorted(int(i.split("-")[1]) for i in ids)
            assert {e["data"]["operation"]["id"] for e in alices.seen if "id" in e} == {created.id}

            # Bob's stream saw his own operations, and nothing of Alice's before or since.
            own = await bobs.until(lambda data: data["operation"]["id"] == bobs_own.id)
            assert own["data"]["operation"]["state"] == "queued"
            last = create_operation(services, "bob", key="bobs-last", task_type="cv.review")
            await bobs.until(lambda data: data["operation"]["id"] == last.id)
            assert created.id not in json.dumps(bobs.seen)
            assert "Strong fit" not in json.dumps(bobs.seen)

    run(scenario())


async def _ended(stream: Events) -> None:
    with pytest.raises(AssertionError, match="the stream ended"):
        await stream.next()


def test_a_revoked_tokens_stream_says_signed_out_and_sends_nothing_after(
    services: Services, gateway: LiveGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Asked again before every send here (``RECHECK_SECONDS`` 0): the revocation, made by
    another process, is seen at the next change, which does not leave."""
    monkeypatch.setattr(events_route, "RECHECK_SECONDS", 0.0)

    async def scenario() -> None:
        async with (
            httpx.AsyncClient(base_url=gateway.url, timeout=HANG_GUARD) as client,
            events(client, "alice") as alices,
        ):
            assert (await alices.next())["event"] == "unread"
            monkeypatch.delenv("OPS_DATABASE_URL", raising=False)
            revoke = ["sessions", "revoke", "--user", "alice", "--database-url", services.db.url]
            assert cli.main(revoke) == 0
            create_operation(services, "alice", key="after-the-revocation")
            assert (await alices.next())["event"] == "signed_out"
            await _ended(alices)

    run(scenario())


def test_a_logout_here_ends_that_sessions_streams_at_once_and_no_other(
    services: Services, gateway: LiveGateway
) -> None:
    async def scenario() -> None:
        async with (
            httpx.AsyncClient(base_url=gateway.url, timeout=HANG_GUARD) as client,
            events(client, "alice") as by_token,
        ):
            await sign_in(client, "alice")
            async with client.stream("GET", "/api/events") as response:
                assert response.status_code == 200
                by_cookie = Events(response)
                assert (await by_cookie.next())["event"] == "unread"
                assert (await client.post("/auth/logout")).status_code == 204
                assert (await by_cookie.next())["event"] == "signed_out"  # with no change
                await _ended(by_cookie)
            created = create_operation(services, "alice", key="after-the-logout")
            await by_token.until(lambda data: data["operation"]["id"] == created.id)

    run(scenario())


def test_a_stream_resumes_after_its_last_event_id(services: Services, gateway: LiveGateway) -> None:
    async def scenario() -> None:
        async with httpx.AsyncClient(base_url=gateway.url, timeout=HANG_GUARD) as client:
            async with events(client, "alice") as first:
                created = create_operation(services, "alice", key="resumed")
                claimed = claim(services, ["strategy.snapshot"])
                running = await first.until(lambda data: data["operation"]["state"] == "running")
            complete(services, claimed)  # while no stream is open
            async with events(client, "alice", running["id"]) as resumed:
                done = await resumed.until(lambda data: data["operation"]["state"] == "succeeded")
                assert done["data"]["operation"]["id"] == created.id

    run(scenario())


def test_after_an_operation_ends_the_count_is_sent_even_when_this_stream_sent_it_last(
    services: Services, gateway: LiveGateway
) -> None:
    """The page may show another count since (its own read after a retry, a mark through
    another gateway): a stream that sent 1, missed the change to 0, and counted 1 again
    after an operation ended kept quiet, and the bell stayed at 0."""

    complete(services, claim_one_of(services, "alice", "first"))
    second = claim_one_of(services, "alice", "second")  # running: no queued state to come

    async def scenario() -> None:
        async with (
            httpx.AsyncClient(base_url=gateway.url, timeout=HANG_GUARD) as client,
            events(client, "alice") as stream,
        ):
            assert (await stream.next())["data"] == {"unread": 1}
            notes = services.notifications.ListNotifications(
                npb.ListNotificationsRequest(), metadata=metadata(Role.GATEWAY, "alice")
            )
            services.notifications.MarkRead(  # as another gateway would: this one hears nothing
                npb.MarkReadRequest(notification_id=notes.notifications[0].id),
                metadata=metadata(Role.GATEWAY, "alice"),
            )
            complete(services, second)
            # The second's end: a stream from now also sends the first's, in the watch's
            # overlap (``app.WATCH_OVERLAP``), possibly after the mark, with its count then.
            await stream.until(
                lambda data: (
                    (data["operation"]["id"], data["operation"]["state"])
                    == (second.operation_id, "succeeded")
                )
            )
            unread = await stream.next()
            assert (unread["event"], unread["data"]) == ("unread", {"unread": 1})

    run(scenario())


def claim_one_of(services: Services, owner: str, key: str) -> Any:
    create_operation(services, owner, key=key)
    return claim(services, ["strategy.snapshot"])


def test_a_last_event_id_ahead_of_the_clock_hides_no_change(
    services: Services, gateway: LiveGateway
) -> None:
    """An id from a replica whose clock ran ahead (or made up) was taken as the cursor:
    the stream then said nothing of any change until the clock caught up."""
    ahead = event_ids.event_id(datetime(2100, 1, 1, tzinfo=UTC), 0)

    async def scenario() -> None:
        async with (
            httpx.AsyncClient(base_url=gateway.url, timeout=HANG_GUARD) as client,
            events(client, "alice", ahead) as stream,
        ):
            created = create_operation(services, "alice", key="after-a-future-id")
            seen = await stream.until(lambda data: data["operation"]["id"] == created.id)
            assert seen["data"]["operation"]["state"] == "queued"

    run(scenario())


def _draft(services: Services, stream: Any, operation_id: str, text: str) -> None:
    stream.send(
        pb.HoldLeasesRequest(leases=[pb.HeldLease(operation_id=operation_id, answer_text=text)])
    )
    stream.read()


def test_no_last_event_id_replays_another_owners_changes_and_ids_tell_nothing_of_them(
    services: Services, gateway: LiveGateway
) -> None:
    """Bob resumes from the start of time and from an id of Alice's stream: both replay his
    changes alone. His ids count his own events (0, 1, 2, ...), whatever Alice does, and
    none of his events names her operations or carries her text."""
    ops = OpsClient(services)

    async def scenario() -> None:
        async with (
            httpx.AsyncClient(base_url=gateway.url, timeout=HANG_GUARD) as client,
            events(client, "alice") as alices,
        ):
            alices_ids = {create_operation(services, "alice", key="queued").id}
            claimed = claim(services, ["strategy.snapshot"])
            alices_ids |= {claimed.operation_id, create_operation(services, "alice").id}
            stream = ops.lease_stream()
            stream.beat((_lease(services, claimed),))
            _draft(services, stream, claimed.operation_id, '{"summary": "Alice only')
            drafted = await alices.until(lambda data: data["draft"] is not None)
            bobs_first = create_operation(services, "bob", key="bobs", task_type="cv.review")

            for resume_from in ("0-0", drafted["id"]):
                async with events(client, "bob", resume_from) as bobs:
                    await bobs.until(lambda data: data["operation"]["id"] == bobs_first.id)
                    _draft(services, stream, claimed.operation_id, '{"summary": "Alice only!')
                    last = create_operation(services, "bob", task_type="cv.review")
                    await bobs.until(lambda data, last=last: data["operation"]["id"] == last.id)
                seen = json.dumps(bobs.seen)
                assert not any(operation_id in seen for operation_id in alices_ids), resume_from
                assert "Alice only" not in seen
                counts = [int(e["id"].split("-")[1]) for e in bobs.seen if "id" in e]
                assert counts == list(range(len(counts))), resume_from
            stream.close()

    run(scenario())


HOSTILE_IDS = [
    "abc",
    "1-2-3",
    "-1-0",
    "1",
    "1-",
    "0x10-1",
    "9" * 19 + "-1",  # more digits than a time has
    "999999999999999999-1",  # past the year 9999
    "1-" + "9" * 10,
    " 1-1",
    "1-1\t",
    "1.5-1",
    "x" * 10_000,
    "\u0661-\u0661",  # Arabic-Indic digits: int() reads them, the id's shape does not
    "1-1; 2-2",
    "1-1,2-2",  # two ids, as a proxy folds a repeated header
]


@pytest.mark.parametrize("hostile", HOSTILE_IDS)
def test_a_hostile_last_event_id_is_a_400_with_a_stable_code(
    services: Services, hostile: str
) -> None:
    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            # Bytes: the header as sent on the wire, non-ASCII too (a str header is ASCII).
            headers = [(k.encode(), v.encode()) for k, v in bearer("alice").items()]
            headers.append((b"Last-Event-ID", hostile.encode()))
            refused = await client.get("/api/events", headers=headers)
            assert refused.status_code == 400, refused.text
            assert refused.json()["code"] == "bad_event_id"
            assert refused.json()["field"] == "Last-Event-ID"

    run(scenario())


def test_a_user_holds_at_most_sixteen_streams_while_others_are_served(
    services: Services,
) -> None:
    settings = gateway_settings(services.target, gateway_long_polls_per_user=16)
    app = create_app(settings, Backends.from_settings(settings))

    async def scenario() -> None:
        async with httpx.AsyncClient(base_url=live.url, timeout=HANG_GUARD) as client:
            held = []
            for _ in range(16):
                opened = events(client, "alice")
                held.append((opened, await opened.__aenter__()))
            refused = await client.get("/api/events", headers=bearer("alice"))
            assert refused.status_code == 429, refused.text
            assert refused.json()["code"] == "too_many_waits"
            assert int(refused.headers["retry-after"]) >= 1
            async with events(client, "bob") as bobs:
                assert (await bobs.next())["event"] == "unread"
            opened, _ = held.pop()
            await opened.__aexit__(None, None, None)
            deadline = asyncio.get_running_loop().time() + HANG_GUARD
            while app.state.long_polls.held("alice") > 15:  # the slot comes back as it closes
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.02)
            async with events(client, "alice") as again:
                assert (await again.next())["event"] == "unread"
            for opened, _ in held:
                await opened.__aexit__(None, None, None)

    with LiveGateway(app) as live:
        run(scenario())


def test_the_analysis_read_carries_the_running_attempts_answer_so_far(
    services: Services,
) -> None:
    entitle(services.db, "alice")
    ops = OpsClient(services)

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            created = await client.post("/api/jobs", json=JOB, headers=bearer("alice"))
            path = f"/api/jobs/{created.json()['id']}/strategy-snapshot"
            assert (await client.post(path, headers=bearer("alice"))).status_code == 202
            running = (await client.get(path, headers=bearer("alice"))).json()
            assert running["draft"] is None  # queued: nothing written yet
            claimed = await asyncio.to_thread(claim, services, ["strategy.snapshot"])
            stream = ops.lease_stream()
            lease = _lease(services, claimed)
            stream.send(
                pb.HoldLeasesRequest(
                    leases=[
                        pb.HeldLease(
                            operation_id=lease.id,
                            owner_id=lease.owner,
                            lease_token=lease.token,
                            answer_text='{"fit_score": 82, "summary": "Stro',
                        )
                    ]
                )
            )
            stream.read()
            read = (await client.get(path, headers=bearer("alice"))).json()
            assert read["operation"]["state"] == "running"
            assert read["draft"]["attempt"] == 1
            assert read["draft"]["partial"] == {"fit_score": 82, "summary": "Stro"}
            # The operation resource stays as it was: no answer text in it.
            status = await client.get(f"/api/operations/{lease.id}", headers=bearer("alice"))
            assert "Stro" not in status.text
            stream.close()

    run(scenario())


def test_a_stream_watches_every_replica_the_target_lists(db_url: str) -> None:
    """Each replica's own commits reach the stream at once, though neither replica's poll
    for the other's commits runs within the test (figure 12 through any replica); a
    replica that is down leaves the stream to the others."""
    clock = ManualClock()
    no_poll = Tuning(watch_interval_seconds=600.0)
    with (
        running_services(db_url, clock, tuning=no_poll) as one,
        running_services(db_url, clock, tuning=no_poll) as two,
    ):
        down = f"127.0.0.1:{refusing_port()}"
        settings = gateway_settings(
            one.target, operations_target=f"ipv4:{one.target},{two.target},{down}"
        )
        with LiveGateway(create_app(settings, Backends.from_settings(settings))) as gateway:

            async def scenario() -> None:
                async with (
                    httpx.AsyncClient(base_url=gateway.url, timeout=HANG_GUARD) as client,
                    events(client, "alice") as alices,
                ):
                    assert (await alices.next())["event"] == "unread"
                    for replica, key in (
                        (two, "through-two"),
                        (one, "through-one"),
                        (two, "again"),
                    ):
                        created = create_operation(replica, "alice", key=key).id
                        got = await alices.until(
                            lambda data, created=created: data["operation"]["id"] == created
                        )
                        assert got["data"]["operation"]["state"] == "queued"
                    ids = [event["id"] for event in alices.seen if event["event"] == "operation"]
                    assert len(ids) == len(set(ids))  # each replica's report of one change: once

            run(scenario())
