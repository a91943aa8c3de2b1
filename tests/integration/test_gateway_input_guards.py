"""What the gateway checks of a request itself, before any service is asked.

An id that could never have been issued is a 404 from the gateway, and a paging
parameter no list could take a 400: the services are not called for either (here they
are down, so a call would show as a 503). A cookie-signed change of any method must name
this site's origin; an unknown member of any JSON body is refused by name; a throttled
dev-login is one ``login_throttled`` line that names only a valid user id. Each test
here was written for a mutation of the gateway's code that the other tests let pass.
"""

from __future__ import annotations

import socket
from typing import Any

from structlog.testing import capture_logs

from durable_ops.gateway import login
from durable_ops.gateway.limits import Throttle
from durable_ops.gateway.problems import problem_from_domain
from durable_ops.model import bounds
from durable_ops.model.errors import CapacityExceeded
from durable_ops.model.tasks import TASKS
from tests.support.gateway import (
    BASE_URL,
    bearer,
    create_operation,
    expect_problem,
    gateway_client,
    make_app,
    run,
    sign_in,
)
from tests.support.grpc_services import Services
from tests.support.workspace_client import create_cv, create_job


def _closed_port() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"


def test_an_id_past_its_bound_is_a_404_without_asking_any_service(
    sqlite_services: Services,
) -> None:
    # Every backend but the Workspace (which signs the caller in) is down: a route that
    # asked its service about the id would answer 503, not the gateway's own 404.
    nowhere = _closed_port()
    app = make_app(
        sqlite_services.target,
        operations_target=nowhere,
        notifications_target=nowhere,
        ai_admission_target=nowhere,
    )
    ai_paths = [task.path for task in TASKS]

    def routes(bad: str) -> list[tuple[str, str, str]]:
        return [
            ("GET", f"/api/operations/{bad}", "operation_not_found"),
            ("GET", f"/api/operations/{bad}:wait", "operation_not_found"),
            ("POST", f"/api/operations/{bad}/cancel", "operation_not_found"),
            ("POST", f"/api/operations/{bad}/retry", "operation_not_found"),
            ("POST", f"/api/notifications/{bad}/read", "notification_not_found"),
            ("POST", f"/api/notifications/{bad}/dismiss", "notification_not_found"),
        ]

    async def scenario() -> None:
        async with gateway_client(app) as client:
            for bad in ("a" * (bounds.ID_MAX + 1), "a" * 5000, "a.b", "%C3%A9t%C3%A9"):
                for method, path, code in routes(bad):
                    response = await client.request(method, path, headers=bearer("alice"))
                    expect_problem(response, 404, code)
                for path in ai_paths:
                    response = await client.post(
                        path.replace("{id}", bad),
                        headers={**bearer("alice"), "Idempotency-Key": "k1"},
                    )
                    assert response.status_code == 404, (path, response.text)
            # An id of the right shape is asked about: the service is down, so 503.
            at_bound = "a" * bounds.ID_MAX
            for method, path, _code in routes(at_bound):
                response = await client.request(method, path, headers=bearer("alice"))
                assert response.status_code == 503, (path, response.text)

    run(scenario())


def test_a_query_no_service_could_accept_is_refused_without_asking_one(
    sqlite_services: Services,
) -> None:
    """The list routes' paging parameters are checked by the gateway: with the services
    behind the lists down, a bad one is still the client's 400, not a 503."""
    nowhere = _closed_port()
    app = make_app(sqlite_services.target, operations_target=nowhere, notifications_target=nowhere)
    queries = [
        ("page_size=0", "invalid_argument"),
        ("page_size=101", "invalid_argument"),
        ("page_token=!!!", "invalid_argument"),
        (f"page_token={'a' * 513}", "invalid_argument"),
        ("page_token=a%00b", "control_character"),
        ("size=5", "unknown_parameter"),
    ]

    async def scenario() -> None:
        async with gateway_client(app) as client:
            for listed in ("/api/operations", "/api/notifications"):
                for query, code in queries:
                    response = await client.get(f"{listed}?{query}", headers=bearer("alice"))
                    expect_problem(response, 400, code)
                # The largest page is asked for: the service is down, so 503.
                response = await client.get(f"{listed}?page_size=100", headers=bearer("alice"))
                assert response.status_code == 503, response.text

    run(scenario())


def test_every_page_size_in_its_range_is_served(sqlite_services: Services) -> None:
    app = make_app(sqlite_services.target)

    async def scenario() -> None:
        async with gateway_client(app) as client:
            for listed in (
                "/api/operations",
                "/api/jobs",
                "/api/attachments",
                "/api/notifications",
            ):
                for size in (bounds.PAGE_SIZE_RANGE[0], 9, 10, 99, bounds.PAGE_SIZE_RANGE[1]):
                    response = await client.get(
                        f"{listed}?page_size={size}", headers=bearer("alice")
                    )
                    assert response.status_code == 200, (listed, size, response.text)

    run(scenario())


def test_a_cookie_signed_delete_or_put_from_another_origin_changes_nothing(
    sqlite_services: Services,
) -> None:
    """The same-origin rule is for every method that changes something, not POST alone."""
    app = make_app(sqlite_services.target)
    foreign: list[dict[str, str]] = [
        {"Origin": "https://evil.example"},
        {"Origin": f"{BASE_URL}:8443"},
        {"Origin": BASE_URL, "Sec-Fetch-Site": "cross-site"},
        {"Referer": "https://evil.example/localhost/jobs"},
        {"Origin": "ftp://localhost"},  # this host, but no web page's origin
    ]

    async def scenario() -> None:
        async with gateway_client(app) as client:
            owner = bearer("alice")
            job = await client.post(
                "/api/jobs", json={"title": "T", "description": "D"}, headers=owner
            )
            cv = await client.post(
                "/api/attachments",
                json={"kind": "cv", "filename": "cv.txt", "text": "CV"},
                headers=owner,
            )
            assert job.status_code == 201, job.text
            assert cv.status_code == 201, cv.text
            changes = [
                ("DELETE", f"/api/jobs/{job.json()['id']}", None),
                ("DELETE", f"/api/attachments/{cv.json()['id']}", None),
                ("PUT", "/api/settings/ai", {"privacy": "external_allowed"}),
            ]
            await sign_in(client, "alice")
            for method, path, body in changes:
                for headers in foreign:
                    response = await client.request(method, path, json=body, headers=headers)
                    expect_problem(response, 403, "cross_origin_request")
                response = await client.request(method, path, json=body)
                expect_problem(response, 403, "origin_required")
            # Nothing was changed by any of them.
            assert (await client.get(f"/api/jobs/{job.json()['id']}")).status_code == 200
            assert (await client.get(f"/api/attachments/{cv.json()['id']}")).status_code == 200
            assert (await client.get("/api/settings/ai")).json()["privacy"] == "local_only"
            # From this site's own pages each is done.
            for method, path, body in changes:
                response = await client.request(
                    method, path, json=body, headers={"Origin": BASE_URL}
                )
                assert response.status_code in (200, 204), (path, response.text)
            assert (await client.get(f"/api/jobs/{job.json()['id']}")).status_code == 404

    run(scenario())


class _Seconds:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_throttled_dev_login_is_one_line_naming_only_a_valid_user(
    sqlite_services: Services,
) -> None:
    """Dev-login counts the form's ``user`` before checking it; a line carries no user
    content: the owner only when it is a user id, and never on a client's line."""
    app = make_app(sqlite_services.target, gateway_trusted_proxies="127.0.0.1", dev_login=True)
    app.state.sign_in_throttle = Throttle(
        login.SIGN_IN_BURST, login.SIGN_IN_REFILL_SECONDS, clock=_Seconds()
    )
    hostile = "<b>mallory</b> was here"

    async def scenario() -> list[int]:
        async with gateway_client(app) as client:

            async def attempt(user: str, address: str) -> int:
                response = await client.post(
                    "/auth/dev-login",
                    data={"user": user},
                    headers={"Origin": BASE_URL, "X-Forwarded-For": address},
                )
                return response.status_code

            statuses = [await attempt("dave", f"192.0.2.{n}") for n in range(11)]
            statuses += [await attempt(hostile, f"192.0.3.{n}") for n in range(11)]
            statuses += [await attempt(f"user{n}", "198.51.100.7") for n in range(11)]
            return statuses

    with capture_logs() as lines:
        statuses = run(scenario())
    assert statuses == [303] * 10 + [429] + [400] * 10 + [429] + [303] * 10 + [429]
    throttled = [line for line in lines if line["event"] == "login_throttled"]
    assert [(t["throttled"], t["client"], t.get("owner")) for t in throttled] == [
        ("user", "192.0.2.10", "dave"),
        ("user", "192.0.3.10", None),  # not a user id: no owner, and its text nowhere
        ("client", "198.51.100.7", None),  # a client's line names nobody
    ]
    assert all(
        t["log_level"] == "warning" and t["refused_attempts"] == 1 and t["retry_after_seconds"] >= 1
        for t in throttled
    )
    assert "mallory" not in repr([dict(line) for line in lines])


def test_an_unknown_member_beside_valid_ones_is_refused_by_name_on_every_json_write(
    sqlite_services: Services,
) -> None:
    """A misspelt member must not be dropped silently (the client meant something by it):
    400 ``unknown_field`` naming it, and nothing is created, started or changed."""
    job = create_job(sqlite_services.workspace, "alice")
    cv = create_cv(sqlite_services.workspace, "alice")
    operation = create_operation(sqlite_services, "alice", task_type="report.render")
    # Each write with valid members and one unknown: the route, the body, the unknown.
    writes: list[tuple[str, str, dict[str, Any], str]] = [
        ("POST", "/api/jobs", {"title": "T", "description": "D", "salary": "1"}, "salary"),
        (
            "POST",
            "/api/attachments",
            {"kind": "cv", "filename": "a", "text": "b", "pdf": "x"},
            "pdf",
        ),
        (
            "PUT",
            "/api/settings/ai",
            {"privacy": "external_allowed", "ai_enabled ": False},
            "ai_enabled ",
        ),
        (
            "POST",
            f"/api/jobs/{job}/strategy-snapshot",
            {"attachment_id": cv, "priority": 1},
            "priority",
        ),
        (
            "POST",
            f"/api/attachments/{cv}/cv-review",
            {"notbefore": "2030-01-01T00:00:00Z"},
            "notbefore",
        ),
        ("POST", f"/api/operations/{operation.id}/cancel", {"reason": "x"}, "reason"),
        ("POST", "/api/notifications/read-all", {"before": "x"}, "before"),
        ("POST", "/auth/login", {"token": "a", "user": "root"}, "user"),
    ]

    async def scenario() -> None:
        async with gateway_client(make_app(sqlite_services.target)) as client:
            owner = bearer("alice")
            for method, path, body, unknown in writes:
                response = await client.request(method, path, json=body, headers=owner)
                problem = expect_problem(response, 400, "unknown_field")
                assert problem["field"] == unknown, (path, problem)
            jobs = (await client.get("/api/jobs", headers=owner)).json()["items"]
            assert [item["id"] for item in jobs] == [job]
            cvs = (await client.get("/api/attachments", headers=owner)).json()["items"]
            assert [item["id"] for item in cvs] == [cv]
            ai_settings = (await client.get("/api/settings/ai", headers=owner)).json()
            assert ai_settings["privacy"] == "local_only"
            listed = (await client.get("/api/operations", headers=owner)).json()["items"]
            assert [(item["id"], item["state"]) for item in listed] == [(operation.id, "queued")]

    run(scenario())


def test_a_retry_after_below_zero_from_a_service_is_sent_as_zero() -> None:
    """``Retry-After`` is a count of seconds (RFC 9110): a negative one is no valid header,
    whatever a service's trailer said."""
    problem = problem_from_domain(CapacityExceeded("busy", retry_after_seconds=-3))
    assert (problem.status, problem.headers["Retry-After"]) == (429, "0")
    waited = problem_from_domain(CapacityExceeded("busy", retry_after_seconds=7))
    assert waited.headers["Retry-After"] == "7"
