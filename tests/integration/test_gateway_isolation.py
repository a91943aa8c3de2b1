"""Owner isolation over HTTP: another user's id looks exactly like a missing one."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.clock import ManualClock
from tests.support.gateway import (
    bearer,
    claim,
    complete,
    create_operation,
    expect_problem,
    fail,
    gateway_client,
    make_app,
    run,
)
from tests.support.grpc_services import Services, running_services

MISSING_ID = "0" * 32


@pytest.fixture
def services(db_url: str) -> Iterator[Services]:
    with running_services(db_url, ManualClock()) as running:
        yield running


# Every route that takes an id: (method, path template, which of alice's ids it takes).
ID_ROUTES = [
    ("GET", "/api/operations/{id}", "running"),
    ("GET", "/api/operations/{id}:wait", "running"),
    ("POST", "/api/operations/{id}/cancel", "running"),
    ("POST", "/api/operations/{id}/cancel", "queued"),
    ("POST", "/api/operations/{id}/retry", "failed"),
    ("POST", "/api/notifications/{id}/read", "notification"),
    ("POST", "/api/notifications/{id}/dismiss", "notification"),
]


def test_every_id_route_hides_other_owners(services: Services) -> None:
    queued = create_operation(services, "alice", key="queued", task_type="cv.review")
    failed = create_operation(services, "alice", key="failed", max_attempts=1)
    fail(services, claim(services, ["strategy.snapshot"]))
    create_operation(services, "alice", key="done")
    complete(services, claim(services, ["strategy.snapshot"]))
    running = create_operation(services, "alice", key="running")
    claim(services, ["strategy.snapshot"])
    ids = {"running": running.id, "queued": queued.id, "failed": failed.id}

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            notes = (await client.get("/api/notifications", headers=bearer("alice"))).json()
            ids["notification"] = notes["items"][0]["id"]
            assert len(notes["items"]) == 2

            for method, template, which in ID_ROUTES:
                theirs = await client.request(
                    method, template.format(id=ids[which]), headers=bearer("bob")
                )
                missing = await client.request(
                    method, template.format(id=MISSING_ID), headers=bearer("bob")
                )
                label = f"{method} {template}"
                assert theirs.status_code == 404, label
                assert theirs.headers["content-type"] == missing.headers["content-type"], label
                assert theirs.content == missing.content, label
                assert set(theirs.headers) == set(missing.headers), label

            # Nothing bob tried changed alice's things.
            alice = bearer("alice")
            listed = (await client.get("/api/operations", headers=alice)).json()["items"]
            states = {item["id"]: (item["state"], item["cancel_requested"]) for item in listed}
            assert states[running.id] == ("running", False)
            assert states[queued.id] == ("queued", False)
            assert states[failed.id] == ("failed", False)
            count = await client.get("/api/notifications/unread-count", headers=alice)
            assert count.json() == {"count": 2}
            # And bob's lists never show them.
            assert (await client.get("/api/operations", headers=bearer("bob"))).json()[
                "items"
            ] == []
            assert (await client.get("/api/notifications", headers=bearer("bob"))).json()[
                "items"
            ] == []

    run(scenario())


def test_a_page_token_from_one_user_reveals_nothing_to_another(services: Services) -> None:
    for index in range(3):
        create_operation(services, "alice", key=f"a{index}")
    create_operation(services, "bob", key="b")

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            first = await client.get("/api/operations?page_size=1", headers=bearer("alice"))
            page_token = first.json()["next_page_token"]
            assert page_token
            borrowed = await client.get(
                "/api/operations", params={"page_token": page_token}, headers=bearer("bob")
            )
            # Refused, as a token of another list (storage.pages): no page at all, of
            # Alice's or from her place in Bob's.
            problem = expect_problem(borrowed, 400, "page_token_mismatch")
            assert "items" not in problem

    run(scenario())
