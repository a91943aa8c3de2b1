"""Bad input is the client's problem: every case answers 4xx problem+json, never 5xx."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from tests.support.clock import ManualClock
from tests.support.gateway import bearer, create_operation, gateway_client, make_app, run
from tests.support.grpc_services import Services, running_services

PROBLEM_JSON = "application/problem+json"
JSON = {"Content-Type": "application/json"}


@pytest.fixture
def services(db_url: str) -> Iterator[Services]:
    with running_services(db_url, ManualClock()) as running:
        yield running


@dataclass(frozen=True)
class Case:
    name: str
    method: str
    path: str
    status: int
    code: str | None = None
    content: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    authenticated: bool = True


def _token(data: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")


def cases(operation_id: str) -> list[Case]:
    cancel = f"/api/operations/{operation_id}/cancel"
    listing = "/api/operations"
    return [
        # bodies
        Case("malformed json", "POST", cancel, 400, "malformed_json", b'{"a":', JSON),
        Case("not utf-8", "POST", cancel, 400, "malformed_json", b"\xff\xfe{}", JSON),
        Case("array body", "POST", cancel, 400, "invalid_body", b"[]", JSON),
        Case("string body", "POST", cancel, 400, "invalid_body", b'"cancel"', JSON),
        Case("deep nesting", "POST", cancel, 400, "invalid_body", b"[" * 400 + b"]" * 400, JSON),
        Case("unknown field", "POST", cancel, 400, "unknown_field", b'{"force": true}', JSON),
        Case(
            "oversize body",
            "POST",
            cancel,
            413,
            "payload_too_large",
            b"{" + b" " * 5000 + b"}",
            JSON,
        ),
        Case(
            "not json",
            "POST",
            cancel,
            415,
            "unsupported_media_type",
            b"force=1",
            {"Content-Type": "application/x-www-form-urlencoded"},
        ),
        Case(
            "login wrong type",
            "POST",
            "/auth/login",
            400,
            "invalid_argument",
            b'{"token": 5}',
            JSON,
            authenticated=False,
        ),
        Case(
            "login null token",
            "POST",
            "/auth/login",
            400,
            "invalid_argument",
            b'{"token": null}',
            JSON,
            authenticated=False,
        ),
        Case(
            "login oversize token",
            "POST",
            "/auth/login",
            400,
            "invalid_argument",
            json.dumps({"token": "x" * 5000}).encode(),
            JSON,
            authenticated=False,
        ),
        Case(
            "login oversize body",
            "POST",
            "/auth/login",
            413,
            "payload_too_large",
            json.dumps({"token": "x" * 9000}).encode(),
            JSON,
            authenticated=False,
        ),
        Case(
            "login unknown field",
            "POST",
            "/auth/login",
            400,
            "unknown_field",
            b'{"token": "a", "user": "root"}',
            JSON,
            authenticated=False,
        ),
        Case(
            "login malformed",
            "POST",
            "/auth/login",
            400,
            "malformed_json",
            b"{",
            JSON,
            authenticated=False,
        ),
        # page sizes and tokens
        *[
            Case(f"page_size={raw!r}", "GET", f"{listing}?page_size={raw}", 400, "invalid_argument")
            for raw in (
                "0",
                "101",
                "-1",
                "abc",
                "1e2",
                "%205",
                "5.0",
                "99999999999999999999",
                "%EF%BC%95",
            )
        ],
        Case(
            "page_size twice", "GET", f"{listing}?page_size=1&page_size=2", 400, "invalid_argument"
        ),
        Case("notification page_size", "GET", "/api/notifications?page_size=500", 400),
        Case("token punctuation", "GET", f"{listing}?page_token=!!!", 400, "invalid_argument"),
        Case("token oversize", "GET", f"{listing}?page_token={'a' * 600}", 400, "invalid_argument"),
        Case("token not json", "GET", f"{listing}?page_token=Zm9vYmFy", 400, "invalid_argument"),
        Case("token wrong shape", "GET", f"{listing}?page_token={_token({'x': 1})}", 400),
        Case(
            "token naive time",
            "GET",
            f"{listing}?page_token={_token({'c': '2026-01-01T00:00:00', 'i': 'x'})}",
            400,
        ),
        Case(
            "token long id",
            "GET",
            f"{listing}?page_token={_token({'c': '2026-01-01T00:00:00+00:00', 'i': 'x' * 99})}",
            400,
        ),
        Case("notification token", "GET", "/api/notifications?page_token=Zm9vYmFy", 400),
        # filters and unknown parameters
        Case("unknown state", "GET", f"{listing}?state=done", 400, "invalid_argument"),
        Case("state nul", "GET", f"{listing}?state=%00", 400, "invalid_argument"),
        Case(
            "bad task type",
            "GET",
            f"{listing}?task_type=Strategy%20Snapshot",
            400,
            "invalid_argument",
        ),
        Case("long task type", "GET", f"{listing}?task_type={'a' * 65}", 400, "invalid_argument"),
        Case("unknown parameter", "GET", f"{listing}?owner=bob", 400, "unknown_parameter"),
        Case(
            "count parameter",
            "GET",
            "/api/notifications/unread-count?x=1",
            400,
            "unknown_parameter",
        ),
        # ids
        Case("unknown id", "GET", f"/api/operations/{'f' * 32}", 404, "operation_not_found"),
        Case("long id", "GET", f"/api/operations/{'a' * 65}", 404, "operation_not_found"),
        Case("very long id", "POST", f"/api/operations/{'a' * 5000}/cancel", 404),
        Case("odd id", "GET", "/api/operations/%00%01", 404, "operation_not_found"),
        Case("unicode id", "GET", "/api/operations/%C3%A9t%C3%A9", 404, "operation_not_found"),
        Case("dotted id", "POST", "/api/operations/..%2F..%2Fetc/retry", 404),
        Case(
            "unknown notification",
            "POST",
            f"/api/notifications/{'f' * 32}/read",
            404,
            "notification_not_found",
        ),
        Case(
            "odd notification",
            "POST",
            "/api/notifications/%20/dismiss",
            404,
            "notification_not_found",
        ),
        # methods and paths
        Case("delete list", "DELETE", listing, 405, "method_not_allowed"),
        Case("get cancel", "GET", cancel, 405, "method_not_allowed"),
        Case("put read", "PUT", f"/api/notifications/{'f' * 32}/read", 405),
        Case("unknown path", "GET", "/api/nothing", 404, "not_found"),
        Case(
            "dev login off",
            "GET",
            "/auth/dev-login?user=alice",
            404,
            "not_found",
            authenticated=False,
        ),
        # authentication
        Case("no token", "GET", listing, 401, "unauthenticated", authenticated=False),
        Case(
            "garbage token",
            "GET",
            listing,
            401,
            "unauthenticated",
            headers={"Authorization": "Bearer \x7f\x7f"},
            authenticated=False,
        ),
        Case(
            "huge token",
            "GET",
            listing,
            401,
            "unauthenticated",
            headers={"Authorization": "Bearer " + "a" * 9000},
            authenticated=False,
        ),
        Case(
            "two schemes",
            "GET",
            listing,
            401,
            "unauthenticated",
            headers={"Authorization": "Token abc"},
            authenticated=False,
        ),
        Case(
            "garbage cookie",
            "GET",
            listing,
            401,
            "unauthenticated",
            headers={"Cookie": "ops_session=%%%"},
            authenticated=False,
        ),
        Case(
            "unauthenticated post",
            "POST",
            cancel,
            401,
            "unauthenticated",
            b"{",
            JSON,
            authenticated=False,
        ),
    ]


async def _send(client: httpx.AsyncClient, case: Case) -> httpx.Response:
    headers = {**(bearer("alice") if case.authenticated else {}), **case.headers}
    return await client.request(case.method, case.path, content=case.content, headers=headers)


def test_each_bad_request_gets_its_4xx_problem(services: Services) -> None:
    operation = create_operation(services, "alice")
    failures: list[str] = []

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            for case in cases(operation.id):
                response = await _send(client, case)
                problem = response.json() if response.content else {}
                if response.status_code != case.status:
                    failures.append(f"{case.name}: {response.status_code} {response.text[:200]}")
                elif not response.headers["content-type"].startswith(PROBLEM_JSON):
                    failures.append(f"{case.name}: content-type {response.headers['content-type']}")
                elif problem.get("status") != case.status or not problem.get("detail"):
                    failures.append(f"{case.name}: body {problem}")
                elif case.code is not None and problem.get("code") != case.code:
                    failures.append(f"{case.name}: code {problem.get('code')} != {case.code}")
            # None of it touched the operation.
            still = await client.get(f"/api/operations/{operation.id}", headers=bearer("alice"))
            assert still.json()["state"] == "queued"

    run(scenario())
    assert failures == []


def test_invalid_argument_names_the_field(services: Services) -> None:
    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            for query, field_name in (
                ("page_size=0", "page_size"),
                ("page_token=Zm9vYmFy", "page_token"),
                ("state=done", "state"),
                ("task_type=A", "task_type"),
            ):
                response = await client.get(f"/api/operations?{query}", headers=bearer("alice"))
                assert response.status_code == 400
                assert response.json()["field"] == field_name, query

    run(scenario())


BAD_VALUES = [
    "",
    "0",
    "-1",
    "%00",
    "%FF",
    "a" * 300,
    "%7B%22x%22%3A1%7D",
    "..%2F",
    "%E2%80%AE",
    "null",
    "[]",
    "true",
]
ROUTES = [
    ("GET", "/api/operations"),
    ("GET", "/api/operations/{v}"),
    ("POST", "/api/operations/{v}/cancel"),
    ("POST", "/api/operations/{v}/retry"),
    ("GET", "/api/notifications"),
    ("GET", "/api/notifications/unread-count"),
    ("POST", "/api/notifications/{v}/read"),
    ("POST", "/api/notifications/{v}/dismiss"),
    ("GET", "/auth/dev-login"),
    ("POST", "/auth/login"),
    ("POST", "/auth/logout"),
]
BODIES: list[tuple[bytes | None, dict[str, str]]] = [
    (None, {}),
    (b"{", JSON),
    (b'{"token": {"a": [1, 2]}}', JSON),
    (b"\x00\x01\x02", {"Content-Type": "application/octet-stream"}),
    (b'{"page_size": 5}', {"Content-Type": "application/json; charset=latin-1"}),
]


def test_nothing_a_client_sends_is_a_5xx(services: Services) -> None:
    """Every route x odd values in the path, query and body, with and without auth."""
    operation = create_operation(services, "alice")
    answered_5xx: list[str] = []
    statuses: set[int] = set()

    async def scenario() -> None:
        async with gateway_client(make_app(services.target, dev_login=True)) as client:
            for method, template in ROUTES:
                for value in [*BAD_VALUES, operation.id]:
                    path = template.format(v=value) if "{v}" in template else template
                    for query in (
                        "",
                        f"?page_size={value}",
                        f"?page_token={value}",
                        f"?state={value}&task_type={value}",
                        f"?user={value}",
                    ):
                        for index, (body, headers) in enumerate(BODIES):
                            auth = bearer("alice") if index % 2 == 0 else {}
                            response = await client.request(
                                method, path + query, content=body, headers={**auth, **headers}
                            )
                            statuses.add(response.status_code)
                            if response.status_code >= 500:
                                answered_5xx.append(
                                    f"{method} {path}{query}: {response.status_code}"
                                )

    run(scenario())
    assert answered_5xx == []
    assert {400, 401, 404} <= statuses
