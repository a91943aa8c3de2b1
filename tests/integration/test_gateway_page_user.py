"""A page acts only as the user it was rendered for (``auth.check_page_user``).

The session cookie is the browser's, not the tab's: a tab kept open (holding typed text)
across a sign-in as someone else in another tab sent alice's CV into mallory's account and
showed mallory's unread count on alice's page. The page now says whom it is for
(``X-Ops-Page-User``; the event stream's ``page_user``), and the gateway refuses a request
that names another user than the credential's: 409 ``page_user_changed``, nothing done.
Without it nothing is compared (API clients, scripts).
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from sqlalchemy import func, select

from durable_ops.gateway.auth import PAGE_USER_HEADER
from durable_ops.storage.schema import Attachment
from tests.support.gateway import (
    BASE_URL,
    LiveGateway,
    bearer,
    gateway_client,
    make_app,
    run,
    sign_in,
)
from tests.support.grpc_services import Services
from tests.support.stored import scalar
from tests.support.workspace_client import CV_TEXT

CV = {"kind": "cv", "filename": "cv.txt", "text": CV_TEXT}
DETAIL = (
    "This page was opened as another user; this browser is now signed in as someone else."
    " Reload the page to continue."
)
HANG_GUARD = 10.0


def _page_user(user: str) -> dict[str, str]:
    return {PAGE_USER_HEADER: user}


def _changed(response: httpx.Response) -> None:
    assert response.status_code == 409, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    problem: dict[str, Any] = response.json()
    assert problem["code"] == "page_user_changed"
    assert problem["type"] == "urn:durable-ops:problem:page_user_changed"
    assert problem["detail"] == DETAIL  # names neither user: the reader may be either


def _attachments(services: Services) -> int:
    return int(scalar(services.db, select(func.count()).select_from(Attachment)) or 0)


def test_a_page_of_another_user_is_refused_and_stores_nothing(services: Services) -> None:
    """Alice's page, the browser now signed in as mallory: each write and read is refused."""
    write = {"Origin": BASE_URL}

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            await sign_in(client, "mallory")
            page = await client.get("/jobs")
            assert '<meta name="ops-user" content="mallory">' in page.text

            _changed(
                await client.post(
                    "/api/attachments", json=CV, headers={**write, **_page_user("alice")}
                )
            )
            _changed(await client.get("/api/attachments", headers=_page_user("alice")))
            _changed(
                await client.get("/api/notifications/unread-count", headers=_page_user("alice"))
            )
            _changed(await client.get("/api/events?page_user=alice"))
            _changed(await client.get("/api/events", headers=_page_user("alice")))
            assert _attachments(services) == 0

            # A bearer token that says a page user is held to it too.
            alices = {**bearer("alice"), **_page_user("mallory")}
            _changed(await client.post("/api/attachments", json=CV, headers={**write, **alices}))
            assert _attachments(services) == 0

            # Sent twice, neither is picked (a proxy in front may have read the other).
            twice = [
                ("Origin", BASE_URL),
                (PAGE_USER_HEADER, "mallory"),
                (PAGE_USER_HEADER, "alice"),
            ]
            refused = await client.post("/api/attachments", json=CV, headers=twice)
            assert (refused.status_code, refused.json()["field"]) == (400, PAGE_USER_HEADER)
            assert _attachments(services) == 0

            # Mallory's own page, and a client that says no page user, are served.
            mine = _page_user("mallory")
            created = await client.post("/api/attachments", json=CV, headers={**write, **mine})
            assert created.status_code == 201, created.text
            listed = await client.get("/api/attachments", headers=mine)
            assert [item["id"] for item in listed.json()["items"]] == [created.json()["id"]]
            assert (
                await client.post("/api/attachments", json=CV, headers=write)
            ).status_code == 201
            assert (await client.get("/api/attachments")).status_code == 200

    run(scenario())
    assert _attachments(services) == 2  # mallory's two, nothing of alice's


def test_a_stream_for_its_own_page_user_opens(services: Services) -> None:
    """``page_user`` is a parameter of the stream (any other is 400 ``unknown_parameter``)."""
    with LiveGateway(make_app(services.target)) as gateway:

        async def scenario() -> None:
            async with httpx.AsyncClient(base_url=gateway.url, timeout=HANG_GUARD) as client:
                await sign_in(client, "mallory")
                async with (
                    asyncio.timeout(HANG_GUARD),
                    client.stream("GET", "/api/events?page_user=mallory") as response,
                ):
                    assert response.status_code == 200, await response.aread()
                    async for line in response.aiter_lines():
                        if line.startswith("event: "):
                            assert line == "event: unread"
                            break

        run(scenario())
