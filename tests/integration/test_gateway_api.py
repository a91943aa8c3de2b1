"""The gateway's HTTP API over the real Operations and Notifications services."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import jwt
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount, Route

from durable_ops.gateway import backends as backends_module
from durable_ops.gateway import login
from durable_ops.gateway.app import create_app
from durable_ops.gateway.auth import (
    SESSION_COOKIE,
    InvalidToken,
    mint_user_token,
    verify_user_token,
)
from durable_ops.gateway.backends import Backends
from durable_ops.gateway.hosts import parse_bind
from durable_ops.gateway.limits import Throttle
from durable_ops.gateway.problems import BACKEND_UNAVAILABLE, problem_from_domain
from durable_ops.model.errors import InvalidArgument
from durable_ops.model.scope import Role
from durable_ops.rpc.client import ServiceCaller
from durable_ops.rpc.errors import domain_error_from_rpc
from durable_ops.rpc.keys import create_key_pair
from durable_ops.rpc.metrics import serve_metrics
from durable_ops.settings import SettingsError
from tests.support.clock import ManualClock
from tests.support.gateway import (
    BASE_URL,
    JWT_SECRET,
    OPERATION_FIELDS,
    LiveGateway,
    bearer,
    claim,
    complete,
    create_operation,
    dev_login,
    fail,
    gateway_client,
    gateway_settings,
    heartbeat,
    make_app,
    run,
    sign_in,
    token,
)
from tests.support.grpc_services import Services
from tests.support.keys import key_env
from tests.support.workspace_client import create_cv, create_job

PROBLEM_JSON = "application/problem+json"
TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


def _closed_port() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"


def _problem(response: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM_JSON)
    body: dict[str, Any] = response.json()
    assert {"type", "title", "status", "detail", "code"} <= body.keys()
    assert body["status"] == status
    if code is not None:
        assert body["code"] == code, body
    return body


# ---- operations ---------------------------------------------------------------------------


def test_operations_list_get_filter_and_page(services: Services, clock: ManualClock) -> None:
    made = []
    for index in range(3):
        made.append(create_operation(services, "alice", subject=("job", f"job-{index}")).id)
        clock.advance(1)
    other = create_operation(services, "bob").id
    cv = create_operation(services, "alice", task_type="cv.review", subject=("attachment", "a1"))

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            listed = (await client.get("/api/operations", headers=bearer("alice"))).json()
            ids = [item["id"] for item in listed["items"]]
            assert ids == [cv.id, *reversed(made)]  # newest first, only alice's
            assert other not in ids
            assert listed["next_page_token"] is None

            first = (
                await client.get("/api/operations?page_size=2", headers=bearer("alice"))
            ).json()
            assert [item["id"] for item in first["items"]] == ids[:2]
            token_ = first["next_page_token"]
            assert isinstance(token_, str)
            assert token_
            second = await client.get(
                "/api/operations",
                params={"page_size": 2, "page_token": token_},
                headers=bearer("alice"),
            )
            assert [item["id"] for item in second.json()["items"]] == ids[2:]
            assert second.json()["next_page_token"] is None

            reviews = await client.get(
                "/api/operations?task_type=cv.review", headers=bearer("alice")
            )
            assert [item["id"] for item in reviews.json()["items"]] == [cv.id]
            queued = await client.get("/api/operations?state=queued", headers=bearer("alice"))
            assert len(queued.json()["items"]) == 4
            running = await client.get("/api/operations?state=running", headers=bearer("alice"))
            assert running.json()["items"] == []

            one = (await client.get(f"/api/operations/{made[0]}", headers=bearer("alice"))).json()
            assert set(one) == OPERATION_FIELDS
            assert one["subject"] == {"type": "job", "id": "job-0"}
            assert one["status_url"] == f"/api/operations/{made[0]}"
            assert one["state"] == "queued"
            assert one["attempt"] == 0
            assert one["max_attempts"] == 3
            assert TIME.match(one["created_at"])
            assert TIME.match(one["updated_at"])
            assert one["started_at"] is None
            assert one["finished_at"] is None

    run(scenario())


def test_progress_cancel_and_retry(services: Services) -> None:
    finished = create_operation(services, "alice", key="finished", task_type="strategy.snapshot")
    complete(services, claim(services, ["strategy.snapshot"]))
    # An SDK task: its retry is the lifecycle's alone (an analysis's is admitted again:
    # tests/integration/test_token_budgets.py).
    queued = create_operation(services, "alice", key="queued", task_type="report.render")
    worked = create_operation(services, "alice", key="worked", task_type="cv.review")
    claimed = claim(services, ["cv.review"])
    assert claimed.operation_id == worked.id
    heartbeat(services, claimed, 40)

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            alice = bearer("alice")
            running = (await client.get(f"/api/operations/{worked.id}", headers=alice)).json()
            assert running["state"] == "running"
            assert running["progress_percent"] == 40
            assert running["attempt"] == 1
            assert TIME.match(running["started_at"])

            cancelled = await client.post(f"/api/operations/{queued.id}/cancel", headers=alice)
            assert cancelled.status_code == 200
            assert cancelled.json()["state"] == "cancelled"
            assert TIME.match(cancelled.json()["finished_at"])
            # The exact duplicate is no error; cancelling another terminal state is a conflict.
            again = await client.post(f"/api/operations/{queued.id}/cancel", headers=alice)
            assert again.status_code == 200
            assert again.json()["state"] == "cancelled"
            _problem(await client.post(f"/api/operations/{finished.id}/cancel", headers=alice), 409)
            _problem(await client.post(f"/api/operations/{finished.id}/retry", headers=alice), 409)

            requested = (
                await client.post(f"/api/operations/{worked.id}/cancel", headers=alice)
            ).json()
            assert requested["state"] == "running"
            assert requested["cancel_requested"] is True
            _problem(await client.post(f"/api/operations/{worked.id}/retry", headers=alice), 409)

            again = await client.post(f"/api/operations/{queued.id}/retry", headers=alice)
            assert again.status_code == 200
            assert again.json()["state"] == "queued"
            assert again.json()["cancel_requested"] is False

    run(scenario())


def test_wait_long_polls_until_done_and_live_answers_say_when_to_look_again(
    services: Services,
) -> None:
    waited = create_operation(services, "alice", key="waited")
    claimed = claim(services, ["strategy.snapshot"])

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            alice = bearer("alice")
            live = await client.get(f"/api/operations/{waited.id}", headers=alice)
            assert live.headers["retry-after"] == "1"
            timed_out = await client.get(
                f"/api/operations/{waited.id}:wait?timeout=0.2", headers=alice
            )
            assert timed_out.status_code == 200
            assert timed_out.json()["state"] == "running"
            assert timed_out.headers["retry-after"] == "1"

            waiting = asyncio.ensure_future(
                client.get(f"/api/operations/{waited.id}:wait?timeout=20", headers=alice)
            )
            await asyncio.sleep(0.3)
            assert not waiting.done()  # it waits: nothing changed yet
            await asyncio.to_thread(complete, services, claimed)
            done = await asyncio.wait_for(waiting, 15)
            assert done.json()["state"] == "succeeded"
            assert "retry-after" not in done.headers
            finished = await client.get(f"/api/operations/{waited.id}", headers=alice)
            assert "retry-after" not in finished.headers

            for bad in ("-1", "31", "soon", "nan", "1_0", "+2", "\uff12", " 2", "1e400"):
                problem = _problem(
                    await client.get(
                        f"/api/operations/{waited.id}:wait?timeout={bad}", headers=alice
                    ),
                    400,
                    "invalid_argument",
                )
                assert problem["field"] == "timeout"
            for no_time in ("0", "0.0", "0e3"):  # the least timeout: the operation as it is
                at_once = await client.get(
                    f"/api/operations/{waited.id}:wait?timeout={no_time}", headers=alice
                )
                assert at_once.status_code == 200, at_once.text
                assert at_once.json()["state"] == "succeeded"
            _problem(
                await client.get(f"/api/operations/{waited.id}:wait?soon=1", headers=alice), 400
            )
            _problem(
                await client.get(f"/api/operations/{waited.id}:wait", headers=bearer("bob")), 404
            )

    run(scenario())


def test_a_wait_begun_while_queued_answers_when_the_operation_starts_running(
    services: Services,
) -> None:
    """SPEC §5: the long-poll answers on a change of state, not only at the end."""
    waited = create_operation(services, "alice", key="starts")

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            waiting = asyncio.ensure_future(
                client.get(f"/api/operations/{waited.id}:wait?timeout=20", headers=bearer("alice"))
            )
            # Its first read is what it waits to change: on a loaded machine a fixed sleep
            # let the claim come first, and the wait then waited for the next change.
            watched = services.operations_app.watch._watches
            async with asyncio.timeout(10):
                while waited.id not in watched:
                    await asyncio.sleep(0.02)
            await asyncio.sleep(0.3)  # then its first read
            assert not waiting.done()  # queued still: it waits
            claimed = await asyncio.to_thread(claim, services, ["strategy.snapshot"])
            started = await asyncio.wait_for(waiting, 2)  # not at the 20 s timeout
            assert started.status_code == 200, started.text
            assert started.json()["id"] == claimed.operation_id == waited.id
            assert started.json()["state"] == "running"
            assert started.headers["retry-after"] == "1"

    run(scenario())


def test_wait_with_the_seen_version_answers_on_progress(
    services: Services, clock: ManualClock
) -> None:
    waited = create_operation(services, "alice", key="followed")
    claimed = claim(services, ["strategy.snapshot"])

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            alice = bearer("alice")
            seen = (await client.get(f"/api/operations/{waited.id}", headers=alice)).json()
            path = f"/api/operations/{waited.id}:wait"
            still = await client.get(
                path, params={"timeout": "0.2", "seen": seen["updated_at"]}, headers=alice
            )
            assert still.json() == seen  # nothing moved: the timeout answers
            waiting = asyncio.ensure_future(
                client.get(
                    path, params={"timeout": "20", "seen": seen["updated_at"]}, headers=alice
                )
            )
            await asyncio.sleep(0.3)
            assert not waiting.done()
            clock.advance(1)
            await asyncio.to_thread(heartbeat, services, claimed, 35)
            moved = await asyncio.wait_for(waiting, 15)
            assert moved.json()["progress_percent"] == 35
            assert moved.json()["state"] == "running"
            assert moved.headers["retry-after"] == "1"
            # The same instant written with an offset is the same version.
            offset = seen["updated_at"].replace("Z", "+00:00")
            at_once = await client.get(
                path, params={"timeout": "20", "seen": offset}, headers=alice
            )
            assert at_once.json()["progress_percent"] == 35
            for bad in ("yesterday", "2026-13-01T00:00:00Z", "2026-12-01T10:00:00", ""):
                problem = _problem(
                    await client.get(path, params={"seen": bad}, headers=alice),
                    400,
                    "invalid_argument",
                )
                assert problem["field"] == "seen"

    run(scenario())


def test_a_failed_operation_shows_no_failure_text_and_can_be_retried(services: Services) -> None:
    operation = create_operation(services, "alice", max_attempts=1, task_type="report.render")
    fail(services, claim(services, ["report.render"]))

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            alice = bearer("alice")
            failed = await client.get(f"/api/operations/{operation.id}", headers=alice)
            assert failed.json()["state"] == "failed"
            listed = await client.get("/api/operations", headers=alice)
            notes = await client.get("/api/notifications", headers=alice)
            for response in (failed, listed, notes):
                assert "secret details" not in response.text
                assert "test_failure" not in response.text
                assert "lease" not in response.text
                assert "idempotency" not in response.text
            retried = await client.post(f"/api/operations/{operation.id}/retry", headers=alice)
            assert retried.json()["state"] == "queued"
            # Retrying removes the old terminal notification.
            assert (await client.get("/api/notifications", headers=alice)).json()["items"] == []

    run(scenario())


# ---- notifications ------------------------------------------------------------------------


def test_notifications_list_read_dismiss_and_count(services: Services, clock: ManualClock) -> None:
    first = create_operation(services, "alice", key="one")
    complete(services, claim(services, ["strategy.snapshot"]))
    clock.advance(1)
    second = create_operation(services, "alice", key="two", max_attempts=1)
    fail(services, claim(services, ["strategy.snapshot"]))
    create_operation(services, "bob", key="bob")
    complete(services, claim(services, ["strategy.snapshot"]))

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            alice = bearer("alice")
            listed = (await client.get("/api/notifications", headers=alice)).json()
            assert [n["operation_id"] for n in listed["items"]] == [second.id, first.id]
            assert listed["next_page_token"] is None
            note = listed["items"][0]
            assert set(note) == {
                "id",
                "operation_id",
                "task_type",
                "outcome",
                "title",
                "body",
                "created_at",
                "read_at",
            }
            assert note["outcome"] == "failed"
            assert note["read_at"] is None
            assert TIME.match(note["created_at"])
            count = await client.get("/api/notifications/unread-count", headers=alice)
            assert count.json() == {"count": 2}

            paged = (await client.get("/api/notifications?page_size=1", headers=alice)).json()
            assert len(paged["items"]) == 1
            assert paged["next_page_token"]

            read = await client.post(f"/api/notifications/{note['id']}/read", headers=alice)
            assert read.status_code == 200
            assert TIME.match(read.json()["read_at"])
            count = await client.get("/api/notifications/unread-count", headers=alice)
            assert count.json() == {"count": 1}

            other = listed["items"][1]["id"]
            dismissed = await client.post(f"/api/notifications/{other}/dismiss", headers=alice)
            assert dismissed.status_code == 200
            count = await client.get("/api/notifications/unread-count", headers=alice)
            assert count.json() == {"count": 0}
            remaining = (await client.get("/api/notifications", headers=alice)).json()["items"]
            assert [n["id"] for n in remaining] == [note["id"]]
            assert (
                await client.get("/api/notifications/unread-count", headers=bearer("bob"))
            ).json() == {"count": 1}

    run(scenario())


# ---- the gRPC -> HTTP table ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "http", "code"),
    [
        (grpc.StatusCode.INVALID_ARGUMENT, 400, "invalid_argument"),
        (grpc.StatusCode.UNAUTHENTICATED, 401, "unauthenticated"),
        (grpc.StatusCode.PERMISSION_DENIED, 403, "permission_denied"),
        (grpc.StatusCode.NOT_FOUND, 404, "not_found"),
        (grpc.StatusCode.ALREADY_EXISTS, 409, "conflict"),
        (grpc.StatusCode.ABORTED, 409, "aborted"),
        (grpc.StatusCode.FAILED_PRECONDITION, 409, "failed_precondition"),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, 429, "resource_exhausted"),
        (grpc.StatusCode.UNAVAILABLE, 503, "unavailable"),
        (grpc.StatusCode.DEADLINE_EXCEEDED, 504, "deadline_exceeded"),
        (grpc.StatusCode.INTERNAL, 503, "backend_unavailable"),
        (grpc.StatusCode.UNKNOWN, 503, "backend_unavailable"),
    ],
)
def test_grpc_status_to_http(status: grpc.StatusCode, http: int, code: str) -> None:
    trailers = grpc.aio.Metadata(("x-error-code", code), ("x-retry-after", "17"))
    if status == grpc.StatusCode.INVALID_ARGUMENT:
        trailers.add("x-error-field", "page_size")
        trailers.add("x-error-reason", "too big")
    error = grpc.aio.AioRpcError(status, grpc.aio.Metadata(), trailers, "page_size: too big")
    problem = problem_from_domain(domain_error_from_rpc(error))
    assert problem.status == http
    if status == grpc.StatusCode.RESOURCE_EXHAUSTED:
        assert problem.headers["Retry-After"] == "17"
    if status == grpc.StatusCode.INVALID_ARGUMENT:
        assert problem.field == "page_size"
        assert problem.body()["field"] == "page_size"
        assert problem.body()["detail"] == "page_size too big."  # "<field> <reason>."


def test_backend_down_is_503_and_slow_is_504(sqlite_services: Services) -> None:
    down = make_app(_closed_port())
    settings = gateway_settings(sqlite_services.target)
    slow = create_app(
        settings,
        Backends(
            ServiceCaller.from_settings(settings, Role.GATEWAY),
            Backends.from_settings(settings).specs.values(),
            call_timeout=0.000001,
        ),
    )

    async def scenario() -> None:
        async with gateway_client(down) as client:
            answer = await client.get("/api/operations", headers=bearer("alice"))
            # Nothing listens: the code says so, the sentence is the one of a service down.
            problem = _problem(answer, 503, "unavailable")
            assert problem["detail"] == BACKEND_UNAVAILABLE
        async with gateway_client(slow) as client:
            _problem(
                await client.get("/api/operations", headers=bearer("alice")),
                504,
                "deadline_exceeded",
            )

    run(scenario())


def test_a_gateway_whose_key_the_services_do_not_trust_answers_503_not_401(
    sqlite_services: Services, tmp_path: Path
) -> None:
    """The services refuse its credential: the gateway's own fault, never the user's."""
    untrusted = create_key_pair(tmp_path, "gateway")  # a gateway key, in no folder they read
    app = make_app(sqlite_services.target, service_key=str(untrusted))

    async def scenario() -> None:
        async with gateway_client(app) as client:
            response = await client.get("/api/notifications/unread-count", headers=bearer("alice"))
            _problem(response, 503, "backend_unavailable")

    run(scenario())


# ---- OpenAPI, health, metrics ---------------------------------------------------------------


def _documented(app: Starlette) -> set[tuple[str, str]]:
    found = set()
    for route in app.routes:
        if isinstance(route, Mount):
            found.add((route.path + "/{path}", "get"))
        elif isinstance(route, Route):
            for method in route.methods or ():
                if method != "HEAD":
                    found.add((route.path, method.lower()))
    return found


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref":
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _refs(item)


def test_openapi_describes_every_route_and_every_error() -> None:
    app = make_app(_closed_port())

    async def scenario() -> dict[str, Any]:
        async with gateway_client(app) as client:
            response = await client.get("/openapi.json")
            assert response.status_code == 200
            document: dict[str, Any] = response.json()
            return document

    document = run(scenario())
    declared = {(path, method) for path, item in document["paths"].items() for method in item}
    assert _documented(app) == declared
    schemas = document["components"]["schemas"]
    for reference in _refs(document):
        assert reference.removeprefix("#/components/schemas/") in schemas, reference
    for path, item in document["paths"].items():
        for method, operation in item.items():
            responses = operation["responses"]
            assert any(code.startswith("2") or code.startswith("3") for code in responses), path
            for code, response in responses.items():
                if code.startswith(("4", "5")) and path.startswith("/api/"):
                    schema = response["content"]["application/problem+json"]["schema"]
                    assert schema == {"$ref": "#/components/schemas/Problem"}, (path, method)
            if path.startswith("/api/"):
                assert "401" in responses, (path, method)
                assert operation["security"], (path, method)
    assert set(schemas["Operation"]["required"]) == OPERATION_FIELDS
    assert set(schemas["Operation"]["properties"]) == OPERATION_FIELDS


def test_a_later_route_module_extends_the_app_and_the_document(sqlite_services: Services) -> None:
    from starlette.responses import JSONResponse

    from durable_ops.gateway.modules import RouteSet
    from durable_ops.gateway.openapi import endpoint, ok
    from durable_ops.gateway.web import Page

    async def ping(_request: Any) -> JSONResponse:
        return JSONResponse({"pong": True})

    extra = RouteSet(
        [Route("/api/ping", ping, methods=["GET"])],
        {"/api/ping": {"get": endpoint("Ping", "ping", "extra", {"200": ok("pong")})}},
        {"Pong": {"type": "object"}},
    )
    settings = gateway_settings(sqlite_services.target)
    app = create_app(
        settings,
        Backends.from_settings(settings),
        modules=[extra],
        pages=[Page("/jobs", "jobs", "Jobs", "Jobs")],
    )
    assert ("/api/ping", "get") in _documented(app)
    assert "/api/ping" in app.state.openapi["paths"]
    assert "/jobs" in app.state.openapi["paths"]
    assert "Pong" in app.state.openapi["components"]["schemas"]

    async def scenario() -> None:
        async with gateway_client(app) as client:
            assert (await client.get("/api/ping")).json() == {"pong": True}
            await sign_in(client, "alice")
            page = await client.get("/operations")
            assert '<a href="/jobs">Jobs</a>' in page.text

    run(scenario())
    with pytest.raises(ValueError, match="twice"):
        create_app(settings, Backends.from_settings(settings), modules=[extra, extra])


def test_healthz_and_readyz(sqlite_services: Services) -> None:
    async def scenario() -> None:
        async with gateway_client(make_app(sqlite_services.target)) as client:
            assert (await client.get("/healthz")).json() == {"status": "ok"}
            ready = await client.get("/readyz")
            assert ready.status_code == 200
            assert ready.json()["backends"] == {
                "operations": "serving",
                "notifications": "serving",
                "workspace": "serving",
                "ai_admission": "serving",
            }
        half = make_app(sqlite_services.target, notifications_target=_closed_port())
        async with gateway_client(half) as client:
            assert (await client.get("/healthz")).status_code == 200
            body = _problem(await client.get("/readyz"), 503, "not_ready")
            assert "notifications" in body["detail"]
            assert "operations" not in body["detail"]
            assert body["backends"]["operations"] == "serving"
            assert body["backends"]["notifications"] != "serving"

    run(scenario())


def test_readyz_callers_share_one_check_a_second(
    sqlite_services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """/readyz is anonymous and each check costs every backend two calls: a flood of it
    must not be a flood of them."""
    checks: list[float] = []
    check_all = Backends._check_all

    async def counted(self: Backends) -> dict[str, str]:
        checks.append(time.monotonic())
        return await check_all(self)

    monkeypatch.setattr(Backends, "_check_all", counted)
    monkeypatch.setattr(backends_module, "HEALTH_SHARED_SECONDS", 0.3)

    async def scenario() -> None:
        async with gateway_client(make_app(sqlite_services.target)) as client:
            answers = await asyncio.gather(*(client.get("/readyz") for _ in range(20)))
            assert {answer.status_code for answer in answers} == {200}
            assert len(checks) == 1
            await asyncio.sleep(0.35)
            assert (await client.get("/readyz")).status_code == 200
            assert len(checks) == 2  # a second check once the first has served its time

    run(scenario())


def _sample(text: str, route: str, status: int, method: str = "GET") -> float | None:
    pattern = re.compile(
        r"^durable_ops_gateway_http_requests_total\{(?P<labels>.*)\} (?P<value>\S+)$", re.MULTILINE
    )
    wanted = {f'method="{method}"', f'route="{route}"', f'status="{status}"'}
    for match in pattern.finditer(text):
        if set(match["labels"].split(",")) == wanted:
            return float(match["value"])
    return None


def test_metrics_count_by_route_template_and_status(sqlite_services: Services) -> None:
    app = make_app(sqlite_services.target)
    other = make_app(sqlite_services.target)

    async def scenario() -> None:
        async with gateway_client(app) as client:
            for _ in range(3):
                await client.get("/api/operations/" + "a" * 32, headers=bearer("alice"))
            await client.get("/api/operations", headers=bearer("alice"))
            await client.get("/no/such/path")
            # Never on the users' port: the operator's own bind serves them (gateway.main).
            assert (await client.get("/metrics")).status_code == 404
            exporter = serve_metrics("127.0.0.1:0", app.state.metrics.registry, setting="gateway")
            try:
                async with httpx.AsyncClient() as scraper:
                    metrics = await scraper.get(f"http://127.0.0.1:{exporter.port}/metrics")
            finally:
                exporter.close()
            assert metrics.status_code == 200
            assert metrics.headers["content-type"].startswith("text/plain")
            text = metrics.text
            assert _sample(text, "/api/operations/{id}", 404) == 3.0
            assert _sample(text, "/api/operations", 200) == 1.0
            assert _sample(text, "unmatched", 404) == 2.0  # /no/such/path, /metrics
            assert "a" * 32 not in text
            assert "durable_ops_gateway_http_request_duration_seconds_bucket{" in text
            assert 'route="/api/operations/{id}"' in text
        async with gateway_client(other) as client:
            await client.get("/healthz")
        fresh = other.state.metrics.exposition().decode()
        assert _sample(fresh, "/api/operations/{id}", 404) is None

    run(scenario())


def test_made_up_methods_and_unknown_paths_add_no_series(sqlite_services: Services) -> None:
    """A scanner's random paths and methods must not mint a series each (Prometheus
    keeps every series it has seen: the label set has to stay bounded)."""
    app = make_app(sqlite_services.target)

    async def scenario() -> None:
        async with gateway_client(app) as client:
            for index in range(40):
                await client.get(f"/probe{index}/x{index}.php")
                await client.request(f"X{index}", "/healthz")
                await client.request(f"Y{index}", f"/probe{index}")
        text = app.state.metrics.exposition().decode()
        series = re.findall(r"^durable_ops_gateway_http_requests_total\{", text, re.MULTILINE)
        assert len(series) == 3, text
        assert _sample(text, "unmatched", 404) == 40.0
        assert _sample(text, "/healthz", 405, method="other") == 40.0
        assert _sample(text, "unmatched", 404, method="other") == 40.0

    run(scenario())


# ---- authentication -----------------------------------------------------------------------


def _unsigned(claims: dict[str, Any]) -> str:
    def part(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")

    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(claims)}."


def _claims(**extra: Any) -> dict[str, Any]:
    now = int(time.time())
    return {"sub": "alice", "iat": now, "exp": now + 600, **extra}


BAD_TOKENS = {
    "expired": jwt.encode(_claims(exp=int(time.time()) - 60), JWT_SECRET, algorithm="HS256"),
    "wrong-secret": mint_user_token("another-secret-that-is-32-bytes-long!", "alice"),
    "alg-none": _unsigned(_claims()),
    "missing-exp": jwt.encode({"sub": "alice"}, JWT_SECRET, algorithm="HS256"),
    "missing-sub": jwt.encode({"exp": int(time.time()) + 600}, JWT_SECRET, algorithm="HS256"),
    "hs512": jwt.encode(_claims(), JWT_SECRET, algorithm="HS512"),
    "bad-sub": jwt.encode(_claims(sub="alice bob/"), JWT_SECRET, algorithm="HS256"),
    "numeric-sub": jwt.encode(
        {"sub": 42, "exp": int(time.time()) + 600}, JWT_SECRET, algorithm="HS256"
    ),
    "garbage": "not.a.jwt",
    "tampered": token("alice")[:-4] + "AAAA",
}


def test_authentication(sqlite_services: Services) -> None:
    create_operation(sqlite_services, "bob", key="bobs")
    app = make_app(sqlite_services.target)
    path = "/api/operations"

    async def scenario() -> None:
        async with gateway_client(app) as client:
            missing = _problem(await client.get(path), 401, "unauthenticated")
            assert "detail" in missing
            assert (await client.get(path, headers=bearer("alice"))).status_code == 200
            for name, bad in BAD_TOKENS.items():
                response = await client.get(path, headers={"Authorization": f"Bearer {bad}"})
                assert response.status_code == 401, name
                assert response.headers["www-authenticate"].startswith("Bearer")
                client.cookies.set(SESSION_COOKIE, bad)
                assert (await client.get(path)).status_code == 401, f"cookie {name}"
                client.cookies.clear()
            for header in (
                "Basic YWxpY2U6cHc=",
                "Bearer",
                "Bearer ",
                "alice",
                "Bearer " + "a" * 5000,
            ):
                response = await client.get(path, headers={"Authorization": header})
                _problem(response, 401)
            # Two credentials: neither wins, though the first alone would sign alice in.
            two = [("Authorization", bearer("alice")["Authorization"]), ("Authorization", "x")]
            refused = _problem(await client.get(path, headers=two), 401, "unauthenticated")
            assert refused["detail"] == "Send one Authorization header."
            await sign_in(client, "alice")
            assert (await client.get(path)).status_code == 200
            # A client-sent identity header is ignored: alice sees her (empty) list, not bob's.
            spoofed = await client.get(path, headers={**bearer("alice"), "x-owner-id": "bob"})
            assert spoofed.status_code == 200
            assert spoofed.json()["items"] == []
            client.cookies.clear()
            assert (await client.get(path, headers={"x-owner-id": "bob"})).status_code == 401

    run(scenario())


def test_issuer_and_audience_are_checked_when_configured(sqlite_services: Services) -> None:
    app = make_app(sqlite_services.target, jwt_issuer="ops-issuer", jwt_audience="ops-web")
    right = mint_user_token(JWT_SECRET, "alice", issuer="ops-issuer", audience="ops-web")
    cases = {
        "no-iss-aud": (token("alice"), 401),
        "wrong-iss": (mint_user_token(JWT_SECRET, "alice", issuer="x", audience="ops-web"), 401),
        "wrong-aud": (mint_user_token(JWT_SECRET, "alice", issuer="ops-issuer", audience="x"), 401),
        "no-aud": (mint_user_token(JWT_SECRET, "alice", issuer="ops-issuer"), 401),
        "right": (right, 200),
    }

    async def scenario() -> None:
        async with gateway_client(app) as client:
            for name, (value, status) in cases.items():
                response = await client.get(
                    "/api/notifications/unread-count", headers={"Authorization": f"Bearer {value}"}
                )
                assert response.status_code == status, name

    run(scenario())


def test_mint_and_verify_user_tokens() -> None:
    minted = mint_user_token(JWT_SECRET, "carol@example.com", ttl_seconds=30)
    header = jwt.get_unverified_header(minted)
    claims = jwt.decode(minted, JWT_SECRET, algorithms=["HS256"])
    assert header["alg"] == "HS256"
    assert claims["sub"] == "carol@example.com"
    assert claims["exp"] - claims["iat"] == 30
    assert verify_user_token(JWT_SECRET, minted) == "carol@example.com"
    with pytest.raises(InvalidArgument):
        mint_user_token(JWT_SECRET, "not valid!")
    with pytest.raises(InvalidArgument):
        mint_user_token(JWT_SECRET, "x" * 65)


@pytest.mark.parametrize(
    ("exp", "iat"),
    [(" {exp} ", "{iat}"), ("{exp}", " {iat}"), ("{exp}", "True")],
    ids=["exp-a-string", "iat-a-string", "iat-a-boolean"],
)
def test_a_token_whose_dates_are_not_numbers_is_refused(exp: str, iat: str) -> None:
    """RFC 7519's NumericDate; PyJWT alone reads a numeric string."""
    now = int(time.time())

    def date(spelt: str) -> object:
        value = spelt.format(exp=now + 60, iat=now)
        return True if value == "True" else int(value) if value == value.strip() else value

    token = jwt.encode({"sub": "carol", "exp": date(exp), "iat": date(iat)}, JWT_SECRET)
    with pytest.raises(InvalidToken):
        verify_user_token(JWT_SECRET, token)
    fine = jwt.encode({"sub": "carol", "exp": now + 60, "iat": now}, JWT_SECRET)
    assert verify_user_token(JWT_SECRET, fine) == "carol"


def test_cookie_changes_from_another_origin_are_refused(sqlite_services: Services) -> None:
    operation = create_operation(sqlite_services, "alice", task_type="report.render")
    app = make_app(sqlite_services.target)
    cancel = f"/api/operations/{operation.id}/cancel"

    async def scenario() -> None:
        async with gateway_client(app) as client:
            await sign_in(client, "alice")
            for headers in (
                {"Origin": "https://evil.example"},
                {"Origin": "http://localhost.evil.example"},
                {"Origin": "http://localhost:8443"},
                {"Origin": "null"},
                {"Sec-Fetch-Site": "cross-site"},
                {"Sec-Fetch-Site": "same-site"},
                {"Origin": BASE_URL, "Sec-Fetch-Site": "cross-site"},
            ):
                _problem(await client.post(cancel, headers=headers), 403, "cross_origin_request")
            state = await client.get(f"/api/operations/{operation.id}")
            assert state.json()["state"] == "queued"  # reads are fine; nothing was cancelled
            # Behind a TLS-terminating proxy the browser's origin says https: same host.
            done = await client.post(
                cancel, headers={"Origin": "https://localhost", "Sec-Fetch-Site": "same-origin"}
            )
            assert done.status_code == 200
            assert done.json()["state"] == "cancelled"
            client.cookies.clear()
            # A bearer token is not ambient: no origin check applies.
            retried = await client.post(
                f"/api/operations/{operation.id}/retry",
                headers={**bearer("alice"), "Origin": "https://tool.example"},
            )
            assert retried.status_code == 200

    run(scenario())


def test_a_cookie_write_that_names_no_origin_is_refused(sqlite_services: Services) -> None:
    """Neither ``Origin`` nor a same-origin ``Referer``: 403, whatever else the request says."""
    operation = create_operation(sqlite_services, "alice", task_type="report.render")
    app = make_app(sqlite_services.target)
    cancel = f"/api/operations/{operation.id}/cancel"

    async def scenario() -> None:
        async with gateway_client(app) as client:
            await sign_in(client, "alice")
            for method, path, body in (
                ("POST", cancel, None),
                ("POST", "/api/jobs", {"title": "T", "description": "D"}),
                ("PUT", "/api/settings/ai", {"privacy": "external_allowed"}),
                ("POST", "/api/notifications/read-all", None),
            ):
                for headers in ({}, {"Sec-Fetch-Site": "same-origin"}):
                    response = await client.request(method, path, json=body, headers=headers)
                    problem = _problem(response, 403, "origin_required")
                    assert "Origin" in problem["detail"]
                # A Referer of another host is another origin.
                elsewhere = {"Referer": "https://evil.example/localhost/jobs"}
                response = await client.request(method, path, json=body, headers=elsewhere)
                _problem(response, 403, "cross_origin_request")
            # Nothing was changed by any of them.
            assert (await client.get(f"/api/operations/{operation.id}")).json()["state"] == "queued"
            assert (await client.get("/api/jobs")).json()["items"] == []
            assert (await client.get("/api/settings/ai")).json()["privacy"] == "local_only"
            # A same-origin Referer is enough (the pages send Referrer-Policy: same-origin).
            done = await client.post(cancel, headers={"Referer": f"{BASE_URL}/operations"})
            assert done.status_code == 200, done.text
            # A bearer token is not ambient: it needs neither.
            client.cookies.clear()
            retried = await client.post(
                f"/api/operations/{operation.id}/retry", headers=bearer("alice")
            )
            assert retried.status_code == 200

    run(scenario())


# ---- sessions and pages -------------------------------------------------------------------


def test_dev_login_exists_only_when_enabled(sqlite_services: Services) -> None:
    async def scenario() -> None:
        async with gateway_client(make_app(sqlite_services.target)) as client:
            _problem(await dev_login(client, "alice"), 404, "not_found")
            _problem(await client.get("/auth/dev-login?user=alice"), 404, "not_found")
            page = await client.get("/")
            assert page.status_code == 200
            assert "opsctl token" in page.text
            assert "/auth/dev-login" not in page.text
        enabled = make_app(sqlite_services.target, dev_login=True)
        async with gateway_client(enabled) as client:
            page_text = (await client.get("/")).text
            assert 'method="post" action="/auth/dev-login"' in page_text
            assert 'name="user"' in page_text
            assert 'value="demo"' in page_text
            _problem(await dev_login(client, "bad user"), 400)
            _problem(await dev_login(client, ""), 400)
            response = await dev_login(client, "alice")
            assert response.status_code == 303
            assert response.headers["location"] == "/operations"
            cookie = response.headers["set-cookie"]
            assert cookie.startswith(f"{SESSION_COOKIE}=")
            attributes = {part.strip().lower() for part in cookie.split(";")}
            assert {"httponly", "path=/", "samesite=strict"} <= attributes
            assert (await client.get("/api/notifications/unread-count")).json() == {"count": 0}
            home = await client.get("/")
            assert home.status_code == 303
            assert home.headers["location"] == "/operations"

    run(scenario())


# What a browser sends with a form's post: the form's answer is the page it shows next.
BROWSER_FORM = {"Origin": BASE_URL, "Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}


def _refusal_page(response: httpx.Response, status: int, saying: str) -> str:
    """The sign-in page again, with the development form saying why it refused."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("text/html")
    assert SESSION_COOKIE not in response.headers.get("set-cookie", "")
    page = response.text
    assert 'method="post" action="/auth/dev-login"' in page
    assert '<p class="form-error" id="dev-error" role="alert">' in page
    assert saying in page, page
    return page


def test_a_refused_dev_login_form_shows_the_sign_in_page_saying_why(
    sqlite_services: Services,
) -> None:
    """A browser's form post that is refused gets a page, never raw problem+json (the
    throttled form showed ``{"type":"urn:durable-ops:problem:too_many_sign_ins",…}``);
    an API client still gets the problem document."""
    app = make_app(sqlite_services.target, dev_login=True)
    seconds = _Seconds()
    app.state.sign_in_throttle = Throttle(
        login.SIGN_IN_BURST, login.SIGN_IN_REFILL_SECONDS, clock=seconds
    )
    down = make_app(sqlite_services.target, dev_login=True, workspace_target=_closed_port())

    async def scenario() -> None:
        async with gateway_client(app) as client:

            async def post(user: str, headers: dict[str, str]) -> httpx.Response:
                return await client.post("/auth/dev-login", data={"user": user}, headers=headers)

            for _ in range(login.SIGN_IN_BURST):
                assert (await post("dave", BROWSER_FORM)).status_code == 303
            throttled = await post("dave", BROWSER_FORM)
            page = _refusal_page(
                throttled, 429, "Too many sign-in attempts; try again in 6 seconds."
            )
            assert throttled.headers["retry-after"] == "6"
            assert 'value="dave"' in page  # the user it named, to try again with
            _problem(await post("dave", {"Origin": BASE_URL}), 429, "too_many_sign_ins")
            seconds.now += 6 * 5

            # The form's other refusals read the same way; what was typed comes back escaped.
            typed = '"><script>alert(1)</script>'
            page = _refusal_page(await post(typed, BROWSER_FORM), 400, "User may contain only")
            assert "<script>alert" not in page
            assert 'value="&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;"' in page
            elsewhere = {**BROWSER_FORM, "Origin": "https://attacker.example"}
            _refusal_page(await post("dave", elsewhere), 403, "Cross-origin requests are refused.")
        async with gateway_client(down) as client:
            unavailable = await client.post(
                "/auth/dev-login", data={"user": "dave"}, headers=BROWSER_FORM
            )
            _refusal_page(unavailable, 503, "unavailable right now; try again shortly.")

    run(scenario())


def test_the_session_cookie_lives_at_most_seven_days(sqlite_services: Services) -> None:
    week = 7 * 24 * 3600

    def max_age(response: httpx.Response) -> int:
        cookie = response.headers["set-cookie"].lower()
        found = re.search(r"max-age=(\d+)", cookie)
        assert found is not None, cookie
        return int(found.group(1))

    async def scenario() -> None:
        async with gateway_client(make_app(sqlite_services.target)) as client:
            for ttl, expected in ((30 * 24 * 3600, week), (600, 600)):
                signed = await client.post("/auth/login", json={"token": token("alice", ttl)})
                assert signed.status_code == 200, signed.text
                assert expected - 5 <= max_age(signed) <= expected, ttl

    run(scenario())


def test_login_with_a_token_and_logout(sqlite_services: Services) -> None:
    app = make_app(sqlite_services.target, ui_unread_poll_ms=1234)

    async def scenario() -> None:
        async with gateway_client(app) as client:
            redirected = await client.get("/operations")
            assert redirected.status_code == 303
            assert redirected.headers["location"] == "/"
            _problem(await client.post("/auth/login", json={"token": "nope"}), 401)
            _problem(
                await client.post(
                    "/auth/login",
                    json={"token": token("alice")},
                    headers={"Origin": "https://x.example"},
                ),
                403,
            )
            signed = await client.post("/auth/login", json={"token": token("alice")})
            assert signed.status_code == 200
            assert signed.json() == {"user": "alice"}
            assert "httponly" in signed.headers["set-cookie"].lower()
            page = await client.get("/operations")
            assert page.status_code == 200
            assert '<meta name="ops-unread-poll-ms" content="1234">' in page.text
            assert 'aria-label="Notifications"' in page.text
            assert "<svg" in page.text
            assert "alice" in page.text
            assert "script-src 'self'" in page.headers["content-security-policy"]

            _problem(
                await client.post("/auth/logout", headers={"Origin": "https://x.example"}), 403
            )
            out = await client.post("/auth/logout")
            assert out.status_code == 204
            cleared = out.headers["set-cookie"].lower()
            assert cleared.startswith(f"{SESSION_COOKIE}=")
            assert "max-age=0" in cleared
            assert SESSION_COOKIE not in client.cookies
            assert (await client.get("/operations")).status_code == 303
            static = await client.get("/static/app.js")
            assert static.status_code == 200
            assert "javascript" in static.headers["content-type"]
            assert static.headers["cache-control"] == "no-cache"
            assert static.headers["etag"]
            _problem(await client.get("/static/nope.js"), 404)

    run(scenario())


def test_no_answer_but_the_ui_files_may_be_stored(services: Services) -> None:
    """Every answer under /api/, /auth/ and /console/, and every page, is the caller's own:
    ``Cache-Control: no-store``, an error's too. Only the UI's files are kept (and
    revalidated, ``no-cache``). The event stream is tested with its route."""
    operation = create_operation(services, "alice")
    job, cv = create_job(services.workspace, "alice"), create_cv(services.workspace, "alice")
    app = make_app(services.target, dev_login=True)
    ids = {"/api/operations/": operation.id, "/api/jobs/": job, "/api/attachments/": cv}
    stored: list[str] = []

    async def scenario() -> None:
        async with gateway_client(app) as client:
            for path, item in app.state.openapi["paths"].items():
                if path == "/api/events":
                    continue  # never ends in-process
                prefix = path.partition("{id}")[0]
                concrete = path.replace("{id}", ids.get(prefix, "f" * 32))
                concrete = concrete.replace("{path}", "app.js").replace(":wait", ":wait?timeout=0")
                for method in item:
                    for headers in (bearer("alice"), {}):
                        response = await client.request(
                            method, concrete, json={}, headers={**headers, "Origin": BASE_URL}
                        )
                        said = response.headers.get("cache-control")
                        kept = path in ("/static/{path}", "/favicon.ico")
                        if said != ("no-cache" if kept else "no-store"):
                            stored.append(f"{method} {path} {response.status_code}: {said}")
            for response in (
                await client.post("/auth/login", json={"token": token("alice")}),
                await client.get("/api/nowhere"),
                await client.get("/nowhere", headers={"Accept": "text/html"}),
                await client.get("/api/operations?page_size=0", headers=bearer("alice")),
            ):
                if response.headers.get("cache-control") != "no-store":
                    stored.append(f"{response.request.url} {response.status_code}")

    run(scenario())
    assert stored == []


def test_every_answer_forbids_framing_sniffing_and_foreign_scripts(services: Services) -> None:
    """A page framed by another site is a click-jacking target, an answer read as another
    type than it says runs as one, and the Referer a cookie write may name its origin by
    must not leave the site: every answer, a page, a problem or a file, says so."""
    operation = create_operation(services, "alice")
    expected = {
        "x-frame-options": "DENY",
        "x-content-type-options": "nosniff",
        "referrer-policy": "same-origin",
    }
    directives = {
        "default-src 'self'",
        "script-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "frame-ancestors 'none'",
        "form-action 'self'",
    }
    failures: list[str] = []

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            for response in (
                await client.get("/operations", headers={"Accept": "text/html"}),
                await client.get("/static/app.js"),
                await client.get(f"/api/operations/{operation.id}", headers=bearer("alice")),
                await client.get("/api/operations?page_size=0", headers=bearer("alice")),
                await client.get("/api/operations"),
                await client.get("/nowhere"),
            ):
                where = f"{response.request.url.path} {response.status_code}"
                for name, value in expected.items():
                    if response.headers.get(name) != value:
                        failures.append(f"{where}: {name}: {response.headers.get(name)}")
                policy = response.headers.get("content-security-policy", "")
                missing = directives - {part.strip() for part in policy.split(";")}
                if missing:
                    failures.append(f"{where}: the policy lacks {sorted(missing)}")

    run(scenario())
    assert failures == []


# ---- the process --------------------------------------------------------------------------


def test_parse_bind() -> None:
    assert parse_bind("127.0.0.1:8080") == ("127.0.0.1", 8080)
    assert parse_bind("[::1]:9000") == ("::1", 9000)
    for bad in ("8080", "localhost", ":80", "host:http", "host:70000"):
        with pytest.raises(SettingsError):
            parse_bind(bad)


def test_serve_gateway_runs_uvicorn_with_structlog(sqlite_services: Services) -> None:
    bind = _closed_port()
    environment = {
        **os.environ,
        "OPS_GATEWAY_BIND": bind,
        "OPS_OPERATIONS_TARGET": sqlite_services.target,
        "OPS_NOTIFICATIONS_TARGET": sqlite_services.target,
        "OPS_WORKSPACE_TARGET": sqlite_services.target,
        "OPS_AI_ADMISSION_TARGET": sqlite_services.target,
        **key_env(Role.GATEWAY),
        "OPS_JWT_SECRET": JWT_SECRET,
        "OPS_LOG_JSON": "true",
        "OPS_LOG_LEVEL": "debug",
    }
    code = "from durable_ops.gateway.main import run; from durable_ops.settings import Settings; "
    code += "run(Settings.from_env())"
    process = subprocess.Popen(
        [sys.executable, "-c", code],
        env=environment,
        cwd=Path(__file__).resolve().parents[2],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                ready = httpx.get(f"http://{bind}/readyz", timeout=1)
                break
            except httpx.TransportError:
                assert process.poll() is None, process.stderr.read() if process.stderr else ""
                assert time.monotonic() < deadline, "the gateway did not start"
                time.sleep(0.1)
        assert ready.status_code == 200
        answer = httpx.get(f"http://{bind}/api/operations", headers=bearer("alice"), timeout=5)
        assert answer.status_code == 200
    finally:
        process.send_signal(signal.SIGTERM)
        _out, errors = process.communicate(timeout=15)
    # uvicorn shuts down gracefully, then re-raises SIGTERM to exit with it.
    assert process.returncode in (0, -signal.SIGTERM), errors
    assert "Traceback" not in errors
    lines = [line for line in errors.splitlines() if line.strip()]
    events = [json.loads(line) for line in lines]  # every line is one JSON event
    assert any(event.get("event") == "http_request" for event in events)
    assert all(event.get("process") == "gateway" for event in events)


def test_a_user_holds_at_most_the_bound_of_long_polls_while_others_are_served(
    services: Services,
) -> None:
    alices = create_operation(services, "alice", key="alice-waits")
    bobs = create_operation(services, "bob", key="bob-waits")
    app = make_app(services.target, gateway_long_polls_per_user=16)
    long_polls = app.state.long_polls

    async def scenario() -> None:
        async with gateway_client(app) as client:
            alice = bearer("alice")
            path = f"/api/operations/{alices.id}:wait?timeout=20"
            held = [asyncio.ensure_future(client.get(path, headers=alice)) for _ in range(16)]
            deadline = time.monotonic() + 10
            while long_polls.held("alice") < 16:
                assert time.monotonic() < deadline, long_polls.held("alice")
                await asyncio.sleep(0.02)

            refused = await client.get(path, headers=alice)
            problem = _problem(refused, 429, "too_many_waits")
            assert refused.headers["retry-after"] == "2"
            assert problem["detail"].endswith(".")
            served = await client.get(
                f"/api/operations/{bobs.id}:wait?timeout=0.2", headers=bearer("bob")
            )
            assert served.status_code == 200, served.text
            assert not any(wait.done() for wait in held)

            # Closing the waits gives their slots back at once.
            for wait in held:
                wait.cancel()
            await asyncio.gather(*held, return_exceptions=True)
            assert long_polls.held("alice") == 0
            again = await client.get(f"/api/operations/{alices.id}:wait?timeout=0.2", headers=alice)
            assert again.status_code == 200, again.text
            assert long_polls.held("alice") == 0

    run(scenario())


def test_a_long_poll_closed_by_its_client_gives_its_slot_back_at_once(
    services: Services,
) -> None:
    waited = create_operation(services, "alice", key="abandoned")
    app = make_app(services.target)
    long_polls = app.state.long_polls
    with LiveGateway(app) as live:
        with pytest.raises(httpx.ReadTimeout):  # the client gives up and closes the connection
            httpx.get(
                f"{live.url}/api/operations/{waited.id}:wait?timeout=20",
                headers={**bearer("alice"), "Host": "localhost"},
                timeout=1.0,
            )
        deadline = time.monotonic() + 5  # well before the wait's 20 s
        while long_polls.held("alice"):
            assert time.monotonic() < deadline, "the closed wait still holds its slot"
            time.sleep(0.05)


# ---- sign-in throttling -----------------------------------------------------------------


class _Seconds:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_sign_in_attempts_are_throttled_per_client_address_and_per_user(
    services: Services,
) -> None:
    # Behind a trusted proxy: the client address is the forwarded one.
    app = make_app(services.target, gateway_trusted_proxies="127.0.0.1", dev_login=True)
    seconds = _Seconds()
    app.state.sign_in_throttle = Throttle(
        login.SIGN_IN_BURST, login.SIGN_IN_REFILL_SECONDS, clock=seconds
    )

    def sent_from(address: str) -> dict[str, str]:
        return {"X-Forwarded-For": address}

    bad_for_alice = mint_user_token("not-the-secret-" + "x" * 40, "alice", 600)

    async def scenario() -> None:
        async with gateway_client(app) as client:

            async def attempt(address: str, sample: str) -> httpx.Response:
                return await client.post(
                    "/auth/login", json={"token": sample}, headers=sent_from(address)
                )

            # A burst of 10 from one address, the last a good sign-in: then 429.
            for _ in range(9):
                _problem(await attempt("198.51.100.1", "not a token"), 401, "unauthenticated")
            good = await attempt("198.51.100.1", token("bob"))
            assert good.status_code == 200, good.text
            throttled = await attempt("198.51.100.1", token("bob"))
            problem = _problem(throttled, 429, "too_many_sign_ins")
            assert throttled.headers["retry-after"] == "6"
            assert "6 seconds" in problem["detail"]
            assert "ops_session" not in throttled.headers.get("set-cookie", "")
            # Another address is served; the throttled one again after one refill.
            assert (await attempt("198.51.100.2", token("bob"))).status_code == 200
            seconds.now += 6
            assert (await attempt("198.51.100.1", token("bob"))).status_code == 200
            _problem(await attempt("198.51.100.1", token("bob")), 429, "too_many_sign_ins")

            # Forged tokens naming alice count for their addresses alone: alice still signs in.
            for index in range(11):
                _problem(await attempt(f"203.0.113.{index}", bad_for_alice), 401)
            assert (await attempt("203.0.113.99", token("alice"))).status_code == 200
            # Per user: alice's own token from nine more addresses, then any address waits.
            for index in range(9):
                assert (await attempt(f"203.0.114.{index}", token("alice"))).status_code == 200
            _problem(await attempt("203.0.114.99", token("alice")), 429, "too_many_sign_ins")
            assert (await attempt("203.0.114.99", token("carol"))).status_code == 200

            # Dev-login counts the same way, per address and per named user.
            for index in range(10):
                signed = await client.post(
                    "/auth/dev-login",
                    data={"user": "dave"},
                    headers={"Origin": BASE_URL, **sent_from(f"192.0.2.{index}")},
                )
                assert signed.status_code == 303, signed.text
            refused = await client.post(
                "/auth/dev-login",
                data={"user": "dave"},
                headers={"Origin": BASE_URL, **sent_from("192.0.2.99")},
            )
            _problem(refused, 429, "too_many_sign_ins")
            assert refused.headers["retry-after"] == "6"

    run(scenario())
