"""A heavy, long-term user: thousands of operations and notifications.

- each filtered list page (a state, a task type, both; the notifications not dismissed)
  reads the page's rows, not the owner's history (counted, ``tests.support.statement_reads``);
- paging through the API to the very end shows every operation exactly once, with new ones
  created while it pages, with and without a filter;
- a page token sent with another list (another filter, another kind of row, another
  user's) is a 400 ``page_token_mismatch``, never a page of that list from another's place;
  a malformed one a 400 ``invalid_argument``, never a 500.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import httpx

from durable_ops.model.states import OperationState
from durable_ops.storage import notifications
from durable_ops.storage.db import Database
from durable_ops.storage.operations import reads
from durable_ops.storage.tx import Tx
from tests.support.clock import ManualClock
from tests.support.gateway import (
    bearer,
    create_operation,
    expect_problem,
    gateway_client,
    make_app,
    run,
)
from tests.support.grpc_services import Services
from tests.support.history import seed_history, seed_notifications
from tests.support.statement_reads import reads_of
from tests.support.workspace_client import create_cv, create_job

OWNER = "heavy"
S = OperationState
FEW = 3
BACKLOG = 400
# What reading the backlog would add at the least: a row or index entry each on MariaDB,
# some ten VM steps each on SQLite. Growth beyond a tenth of it fails.
WALK = {"mysql": BACKLOG, "sqlite": 10 * BACKLOG}


def _page(**filters: Any) -> Callable[[Tx], object]:
    def read(tx: Tx) -> object:
        page = reads.list_page(Tx(tx.connection, OWNER), size=20, token="", **filters)
        assert len(page.items) == FEW, filters
        return page

    return read


def _notes(tx: Tx) -> object:
    page = notifications.list_page(Tx(tx.connection, OWNER), size=20, token="")
    assert len(page.items) == FEW
    return page


READS: dict[str, Callable[[Tx], object]] = {
    "failed": _page(state=S.FAILED),
    "failed of a type": _page(state=S.FAILED, task_type="cv.review"),
    "a type": _page(task_type="cv.review"),
    "notifications": _notes,
}


def test_a_filtered_page_reads_the_page_not_the_history(database: Database) -> None:
    """A state the owner has few of walked every operation it ever made (SQLite; MariaDB
    sorted the state's rows of every owner, or walked the history too), a task type the
    same, and the notification list every dismissed notification newer than its page."""
    start = ManualClock()() - timedelta(days=365)
    # The few: the oldest, failed, of the type asked for; the notifications not dismissed.
    seed_history(database, OWNER, FEW, start, states=[S.FAILED], task_type="cv.review")
    seed_notifications(database, OWNER, FEW, start)
    before = {name: reads_of(database, work) for name, work in READS.items()}
    # The history: newer, none of them asked for.
    later = start + timedelta(days=30)
    seed_history(database, OWNER, BACKLOG, later, states=[S.SUCCEEDED, S.CANCELLED])
    seed_notifications(database, OWNER, BACKLOG, later, dismissed=True)
    after = {name: reads_of(database, work) for name, work in READS.items()}
    walk = WALK[database.dialect]
    assert all(after[name] - before[name] < walk / 10 for name in before), (before, after)


async def _all_pages(
    client: httpx.AsyncClient, query: dict[str, str], between: Callable[[], object]
) -> list[str]:
    """Every id of the list, page after page to the end; ``between`` runs after each page."""
    ids: list[str] = []
    token = ""
    while True:
        params = {**query, "page_size": "100", **({"page_token": token} if token else {})}
        answer = await client.get("/api/operations", params=params, headers=bearer(OWNER))
        assert answer.status_code == 200, answer.text
        body = answer.json()
        ids += [item["id"] for item in body["items"]]
        token = body["next_page_token"] or ""
        if not token:
            return ids
        between()


def test_paging_to_the_end_shows_each_once_while_new_ones_arrive(
    services: Services, clock: ManualClock
) -> None:
    history = seed_history(services.db, OWNER, 2_000, clock() - timedelta(hours=1))
    failed = history[1::3]  # the states go in turn: succeeded, failed, cancelled
    arrived: list[str] = []

    def create() -> None:
        clock.advance(1)
        arrived.append(create_operation(services, OWNER).id)

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            assert await _all_pages(client, {}, create) == history
            assert await _all_pages(client, {"state": "failed"}, create) == failed
            known = list(arrived)
            everything = await _all_pages(client, {"task_type": "strategy.snapshot"}, create)
            assert everything == [*reversed(known), *history]

    run(scenario())


def _token(fields: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(fields).encode()).decode().rstrip("=")


def test_a_page_token_of_another_list_is_refused(services: Services, clock: ManualClock) -> None:
    """A token was a bare place: sent with another filter, another kind of row, or by
    another user, it started that list there, and a client's loop skipped rows silently."""
    seed_history(services.db, OWNER, 5, clock() - timedelta(hours=1))
    seed_history(services.db, "other", 5, clock() - timedelta(hours=1))
    for _ in range(3):
        create_job(services.workspace, OWNER)
        create_cv(services.workspace, OWNER)

    # The query in the path: httpx's `params` would replace it.
    async def token_of(client: httpx.AsyncClient, path: str, user: str = OWNER) -> str:
        answer = await client.get(f"{path}&page_size=1", headers=bearer(user))
        token: str = answer.json()["next_page_token"]
        assert token, answer.text
        return token

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:

            async def get(path: str, token: str, user: str = OWNER) -> httpx.Response:
                return await client.get(f"{path}&page_token={token}", headers=bearer(user))

            listing = "/api/operations?"
            unfiltered = await token_of(client, listing)
            failed = await token_of(client, f"{listing}state=failed")
            jobs = await token_of(client, "/api/jobs?")
            others = await token_of(client, listing, user="other")
            mismatched = [
                await get(f"{listing}state=failed", unfiltered),
                await get(listing, failed),
                await get(f"{listing}state=succeeded", failed),
                await get(f"{listing}task_type=cv.review", unfiltered),
                await get("/api/attachments?", jobs),
                await get("/api/notifications?", unfiltered),
                await get(listing, others),
                await get(listing, unfiltered, user="other"),
            ]
            for answer in mismatched:
                body = expect_problem(answer, 400, "page_token_mismatch")
                assert "first page" in body["detail"], body
            # Its own list still takes it.
            assert (await get(listing, unfiltered)).status_code == 200
            assert (await get(f"{listing}state=failed", failed)).status_code == 200
            # Malformed (well-formed base64 and JSON, not an object, or a list name not a
            # string): a 400, not a 500.
            place = {"c": "2026-01-01T00:00:00+00:00", "i": "a" * 32}
            for fields in ([1, 2], "text", 7, {**place, "l": 5}, {**place, "l": None}):
                expect_problem(await get(listing, _token(fields)), 400, "invalid_argument")

    run(scenario())


def test_the_unread_count_and_mark_all_read_agree_with_the_list(database: Database) -> None:
    """Counts that tell the truth over thousands: dismissed ones are in neither."""
    now = ManualClock()()
    seed_notifications(database, OWNER, 2_500, now)
    seed_notifications(database, OWNER, 500, now - timedelta(days=200), dismissed=True)

    def listed(tx: Tx) -> int:
        count, token = 0, ""
        while True:
            page = notifications.list_page(tx, size=100, token=token)
            count += sum(1 for note in page.items if note.read_at is None)
            if page.next_token is None:
                return count
            token = page.next_token

    assert database.run(notifications.unread_count, owner_id=OWNER) == 2_500
    assert database.run(listed, owner_id=OWNER) == 2_500
    marked = database.run(lambda tx: notifications.mark_all_read(tx, now), owner_id=OWNER)
    assert marked == 2_500
    assert database.run(notifications.unread_count, owner_id=OWNER) == 0
    assert database.run(listed, owner_id=OWNER) == 0
