"""The gateway knows its name, signs in developers only on loopback, and believes only its proxy.

Issue 35: a DNS-rebinding page reaches a local gateway under the attacker's
host name (refused: 400 ``host_not_allowed`` before routing); dev-login must
not set a session from another site, nor exist on a gateway others can reach;
``X-Forwarded-Proto`` makes the session cookie ``Secure`` only when a listed
proxy sends it.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from structlog.testing import capture_logs

from durable_ops.gateway.auth import SESSION_COOKIE
from durable_ops.gateway.hosts import allowed_hosts, host_name
from durable_ops.settings import Settings
from tests.support.gateway import (
    BASE_URL,
    bearer,
    create_operation,
    dev_login,
    expect_problem,
    gateway_client,
    make_app,
    run,
    token,
)
from tests.support.grpc_services import Services

PROBLEM_JSON = "application/problem+json"
FOREIGN = "rebind.attacker.example"


def _refused(response: httpx.Response) -> None:
    assert response.status_code == 400, response.text
    assert response.headers["content-type"].startswith(PROBLEM_JSON)
    assert response.json()["code"] == "host_not_allowed"
    assert "set-cookie" not in response.headers


# ---- Host ---------------------------------------------------------------------------------


def test_a_foreign_host_is_refused_on_the_api_the_pages_and_auth(services: Services) -> None:
    operation = create_operation(services, "alice")
    app = make_app(services.target, dev_login=True)
    requests: list[tuple[str, str, dict[str, Any]]] = [
        ("GET", "/api/operations", {"headers": bearer("alice")}),
        ("GET", f"/api/operations/{operation.id}", {"headers": bearer("alice")}),
        ("POST", f"/api/operations/{operation.id}/cancel", {"headers": bearer("alice")}),
        ("GET", "/api/nothing-here", {}),  # refused before routing: not a 404
        ("GET", "/", {}),
        ("GET", "/operations", {}),
        ("GET", "/static/app.css", {}),
        ("GET", "/openapi.json", {}),
        ("POST", "/auth/login", {"json": {"token": token("alice")}}),
        ("POST", "/auth/logout", {}),
        ("POST", "/auth/dev-login", {"data": {"user": "alice"}}),
    ]

    async def scenario() -> None:
        async with gateway_client(app) as client:
            for host in (FOREIGN, f"{FOREIGN}:8080", "localhost.attacker.example", "[::2]:8080"):
                # The page a rebinding attacker serves is same-origin with its own name.
                origin = {"Host": host, "Origin": f"http://{host}"}
                for method, path, options in requests:
                    headers = {**options.get("headers", {}), **origin}
                    sent = {**options, "headers": headers}
                    _refused(await client.request(method, path, **sent))
            # Nothing was done under the foreign name: the operation is still queued.
            mine = await client.get(f"/api/operations/{operation.id}", headers=bearer("alice"))
            assert mine.json()["state"] == "queued"

    run(scenario())


def test_an_allowed_host_is_served(services: Services) -> None:
    operation = create_operation(services, "alice")
    app = make_app(services.target)

    async def scenario() -> None:
        async with gateway_client(app) as client:
            for host in ("localhost", "LOCALHOST:8080", "127.0.0.1:8080", "[::1]:8080"):
                listing = await client.get(
                    "/api/operations", headers={**bearer("alice"), "Host": host}
                )
                assert listing.status_code == 200, (host, listing.text)
                assert [item["id"] for item in listing.json()["items"]] == [operation.id]
                assert (await client.get("/", headers={"Host": host})).status_code == 200
            # The probes answer whatever name an orchestrator uses for the container.
            assert (await client.get("/healthz", headers={"Host": FOREIGN})).status_code == 200

    run(scenario())


def test_configured_names_replace_the_defaults() -> None:
    app = make_app("127.0.0.1:1", gateway_allowed_hosts="ops.example.com")

    async def scenario() -> None:
        async with gateway_client(app) as client:
            served = await client.get("/openapi.json", headers={"Host": "ops.example.com:443"})
            assert served.status_code == 200
            _refused(await client.get("/openapi.json", headers={"Host": "localhost"}))

    run(scenario())


@pytest.mark.parametrize(
    ("bind", "extra"),
    [
        ("127.0.0.1:8080", set()),
        ("0.0.0.0:8080", set()),
        ("[::]:8080", set()),
        ("192.0.2.10:8080", {"192.0.2.10"}),
        ("Ops.Example.com:8080", {"ops.example.com"}),
        ("[2001:db8::1]:8080", {"[2001:db8::1]"}),
    ],
)
def test_the_default_names_are_loopback_and_the_bind_host(bind: str, extra: set[str]) -> None:
    expected = {"localhost", "127.0.0.1", "[::1]"} | extra
    assert allowed_hosts(Settings(gateway_bind=bind)) == expected


@pytest.mark.parametrize(
    ("header", "name"),
    [
        ("localhost:8080", "localhost"),
        ("[::1]:8080", "[::1]"),
        ("[::1]", "[::1]"),
        ("[::1", ""),  # no closing bracket: no name, never an allowed one
        ("[::1]x", ""),
        ("Example.COM", "example.com"),
        ("localhost:abc", ""),  # a port that is no port
        ("localhost:9100:1", ""),
        ("[::1]:x", ""),
    ],
)
def test_the_host_header_is_read_without_its_port(header: str, name: str) -> None:
    assert host_name(header) == name


# ---- dev-login ----------------------------------------------------------------------------


def test_a_cross_site_dev_login_sets_no_session(services: Services) -> None:
    app = make_app(services.target, dev_login=True)
    form = {"user": "alice"}
    cross_site: list[tuple[dict[str, str], int, str]] = [
        ({}, 403, "origin_required"),
        ({"Origin": "https://evil.example"}, 403, "cross_origin_request"),
        ({"Origin": "null"}, 403, "cross_origin_request"),
        ({"Origin": f"{BASE_URL}:8443"}, 403, "cross_origin_request"),
        ({"Origin": BASE_URL, "Sec-Fetch-Site": "cross-site"}, 403, "cross_origin_request"),
        ({"Referer": "https://evil.example/localhost"}, 403, "cross_origin_request"),
    ]

    async def scenario() -> None:
        async with gateway_client(app) as client:
            # A link or a redirect from another site is a GET: never a sign-in.
            navigation = await client.get("/auth/dev-login?user=alice")
            expect_problem(navigation, 405, "method_not_allowed")
            assert navigation.headers["allow"] == "POST"
            assert "set-cookie" not in navigation.headers
            for headers, status, code in cross_site:
                response = await client.post("/auth/dev-login", data=form, headers=headers)
                expect_problem(response, status, code)
                assert "set-cookie" not in response.headers, headers
            assert SESSION_COOKIE not in client.cookies
            expect_problem(await client.get("/api/operations"), 401, "unauthenticated")
            assert (await client.get("/")).status_code == 200  # still the sign-in page
            # The page's own form, same origin, does sign in.
            signed_in = await dev_login(client, "alice")
            assert signed_in.status_code == 303
            assert SESSION_COOKIE in client.cookies
            assert (await client.get("/api/operations")).status_code == 200

    run(scenario())


@pytest.mark.parametrize(
    "bind", ["0.0.0.0:8080", "[::]:8080", "192.0.2.10:8080", "ops.example.com:8080"]
)
def test_dev_login_is_absent_when_the_bind_is_not_loopback(services: Services, bind: str) -> None:
    with capture_logs() as logs:
        app = make_app(services.target, dev_login=True, gateway_bind=bind)
    refusals = [entry for entry in logs if entry["event"] == "dev_login_refused"]
    assert len(refusals) == 1
    assert bind in refusals[0]["reason"]
    assert "not on loopback" in refusals[0]["reason"]
    assert "/auth/dev-login" not in app.state.openapi["paths"]

    async def scenario() -> None:
        async with gateway_client(app) as client:
            expect_problem(await dev_login(client, "alice"), 404, "not_found")
            expect_problem(await client.get("/auth/dev-login?user=alice"), 404, "not_found")
            assert SESSION_COOKIE not in client.cookies
            page = await client.get("/")
            assert page.status_code == 200
            assert "/auth/dev-login" not in page.text

    run(scenario())


@pytest.mark.parametrize("bind", ["127.0.0.1:8080", "127.0.0.2:8080", "[::1]:8080", "localhost:80"])
def test_dev_login_is_served_on_a_loopback_bind(services: Services, bind: str) -> None:
    with capture_logs() as logs:
        app = make_app(services.target, dev_login=True, gateway_bind=bind)
    assert [entry for entry in logs if entry["event"] == "dev_login_refused"] == []

    async def scenario() -> None:
        async with gateway_client(app) as client:
            assert (await dev_login(client, "alice")).status_code == 303
            assert (await client.get("/api/operations")).status_code == 200

    run(scenario())


def test_the_dev_login_form_is_checked_field_by_field(services: Services) -> None:
    app = make_app(services.target, dev_login=True)
    same_origin = {"Origin": BASE_URL}
    form_type = {"Content-Type": "application/x-www-form-urlencoded", **same_origin}

    async def scenario() -> None:
        async with gateway_client(app) as client:
            for body, status, code in (
                (b"user=alice&user=bob", 400, "invalid_argument"),
                (b"user=alice&admin=1", 400, "unknown_field"),
                (b"user=%ff", 400, "invalid_body"),
                (b"user=a%20b", 400, "invalid_argument"),
                (b"", 400, "invalid_argument"),
                (b"user=" + b"a" * 2000, 413, "payload_too_large"),
            ):
                response = await client.post("/auth/dev-login", content=body, headers=form_type)
                expect_problem(response, status, code)
            as_json = await client.post(
                "/auth/dev-login", json={"user": "alice"}, headers=same_origin
            )
            expect_problem(as_json, 415, "unsupported_media_type")
            assert SESSION_COOKIE not in client.cookies

    run(scenario())


# ---- forwarded headers --------------------------------------------------------------------


def _cookie_attributes(response: httpx.Response) -> set[str]:
    assert response.status_code in (200, 204, 303), response.text
    cookie = response.headers["set-cookie"]
    assert cookie.startswith(f"{SESSION_COOKIE}=")
    return {part.strip().lower() for part in cookie.split(";")}


@pytest.mark.parametrize(
    ("trusted", "peer", "secure"),
    [
        ("10.0.0.0/8", "10.1.2.3", True),
        ("10.0.0.0/8,192.0.2.7", "192.0.2.7", True),
        ("10.0.0.0/8", "203.0.113.9", False),
        ("", "127.0.0.1", False),  # uvicorn's own default trusted loopback; ours trusts nobody
        ("", "10.1.2.3", False),
    ],
)
def test_the_cookie_is_secure_only_when_a_trusted_proxy_says_https(
    services: Services, trusted: str, peer: str, secure: bool
) -> None:
    app = make_app(services.target, dev_login=True, gateway_trusted_proxies=trusted)
    forwarded = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "198.51.100.4"}

    async def scenario() -> None:
        async with gateway_client(app, peer=(peer, 40000)) as client:
            headers = {**forwarded, "Origin": "https://localhost"}
            signed_in = await client.post(
                "/auth/login", json={"token": token("alice")}, headers=headers
            )
            assert ("secure" in _cookie_attributes(signed_in)) is secure
            dev = await client.post("/auth/dev-login", data={"user": "alice"}, headers=headers)
            assert ("secure" in _cookie_attributes(dev)) is secure
            signed_out = await client.post("/auth/logout", headers=headers)
            assert signed_out.status_code == 204
            assert ("secure" in _cookie_attributes(signed_out)) is secure

    run(scenario())
