"""Hostile JSON and what the document promises: never a 500, and no schema-valid request refused.

A body may hold numbers too long to convert, ``null`` where a value belongs, a
lone surrogate where a field name belongs; a method the path does not serve
must say which it does; and the OpenAPI document must describe the rules the
server applies, checked here by hand and by a bounded schemathesis run.
"""

from __future__ import annotations

import re
import socket
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.generation.case import Case
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    positive_data_acceptance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from durable_ops.gateway import bodies, connections
from durable_ops.gateway.app import create_app
from durable_ops.gateway.backends import Backends
from tests.support.clock import ManualClock
from tests.support.figures import report
from tests.support.gateway import (
    LiveGateway,
    bearer,
    expect_problem,
    gateway_client,
    gateway_settings,
    make_app,
    run,
    token,
)
from tests.support.grpc_services import Services, running_services
from tests.support.workspace_client import create_cv, create_job

JSON = {"Content-Type": "application/json"}
HUGE = "1" * 5000  # past Python's 4,300-digit limit of int(str)


@pytest.fixture
def services(db_url: str) -> Iterator[Services]:
    with running_services(db_url, ManualClock()) as running:
        yield running


# ---- numbers ------------------------------------------------------------------------------


def test_a_huge_number_anywhere_in_a_body_is_a_400(services: Services) -> None:
    job = create_job(services.workspace, "alice")
    writes = [
        ("POST", "/auth/login", False),  # no credential at all
        ("POST", "/api/jobs", True),
        ("POST", "/api/attachments", True),
        ("PUT", "/api/settings/ai", True),
        ("POST", f"/api/jobs/{job}/strategy-snapshot", True),
    ]
    bodies = [
        f'{{"token": {HUGE}}}',
        f'{{"title": [1, {{"x": -{HUGE}}}]}}',
        f'{{"ai_enabled": {HUGE}.5e3}}',
        f'{{"attachment_id": 1.{HUGE}}}',
        HUGE,
    ]

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            for method, path, signed_in in writes:
                headers = {**JSON, **(bearer("alice") if signed_in else {})}
                for body in bodies:
                    response = await client.request(method, path, content=body, headers=headers)
                    problem = expect_problem(response, 400, "number_too_long")
                    assert problem["detail"] == "The body has a number of more than 64 digits."
                # Not JSON either, though Python reads them: NaN and Infinity.
                for word in ("NaN", "-Infinity"):
                    response = await client.request(
                        method, path, content=f'{{"x": {word}}}', headers=headers
                    )
                    expect_problem(response, 400, "malformed_json")
            # An action that takes no body reads at most 1 kB: 900 digits fit, and are refused.
            response = await client.post(
                "/api/notifications/read-all",
                content=f'{{"x": {HUGE[:900]}}}',
                headers={**JSON, **bearer("alice")},
            )
            expect_problem(response, 400, "number_too_long")
            settings_now = await client.get("/api/settings/ai", headers=bearer("alice"))
            assert settings_now.json()["ai_enabled"] is False

    run(scenario())


def test_a_number_of_64_digits_reaches_its_fields_own_check(services: Services) -> None:
    """An integer may have 64 digits (its sign aside), a number with a point or an exponent
    80 characters: such a number is read and then refused by the field it was sent for,
    by name; one more is ``number_too_long``."""
    digits = "9" * 64
    read = [digits, f"-{digits}", "-9." + "9" * 77, "-9." + "9" * 72 + "e-308"]
    too_long = [f"{digits}9", f"-{digits}9", "-9." + "9" * 78, "-9." + "9" * 73 + "e-308"]

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            headers = {**JSON, **bearer("alice")}
            for number in [*read, *too_long]:
                response = await client.put(
                    "/api/settings/ai", content=f'{{"ai_enabled": {number}}}', headers=headers
                )
                if number in read:
                    problem = expect_problem(response, 400, "invalid_argument")
                    assert problem["field"] == "ai_enabled", (number, problem)
                else:
                    expect_problem(response, 400, "number_too_long")

    run(scenario())


def _exchange(port: int, requests: list[bytes]) -> list[int]:
    """Send ``requests`` on one keep-alive connection; the statuses answered before it closed."""
    statuses: list[int] = []
    with socket.create_connection(("127.0.0.1", port), timeout=5) as connection:
        reader = connection.makefile("rb")
        for request in requests:
            try:
                connection.sendall(request)
                status_line = reader.readline()
            except OSError:
                break
            if not status_line:
                break  # the server closed the connection
            statuses.append(int(status_line.split()[1]))
            length = 0
            while (line := reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode("latin-1").partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip())
            reader.read(length)
    return statuses


def _http(method: str, path: str, body: str = "") -> bytes:
    payload = body.encode()
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    )
    return head.encode() + payload


def test_a_huge_number_neither_fails_the_server_nor_drops_the_connection() -> None:
    """Over real HTTP: the 400 comes back and the same connection serves the next request."""
    settings = gateway_settings("127.0.0.1:1")
    with LiveGateway(create_app(settings, Backends.from_settings(settings))) as gateway:
        statuses = _exchange(
            gateway.port,
            [
                _http("POST", "/auth/login", f'{{"token": {HUGE}}}'),
                _http("POST", "/auth/login", '{"token": "x"}'),
                _http("GET", "/healthz"),
            ],
        )
    assert statuses == [400, 401, 200]


def _short_body(port: int) -> socket.socket:
    """A connection that announced 100 bytes of body and sent 4."""
    connection = socket.create_connection(("127.0.0.1", port), timeout=5)
    head = _http("POST", "/auth/login", "x" * 100).split(b"\r\n\r\n")[0] + b"\r\n\r\n"
    connection.sendall(head + b'{"to')
    return connection


def test_a_client_gone_before_its_body_arrived_is_not_logged_as_a_fault(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    settings = gateway_settings("127.0.0.1:1")
    with (
        caplog.at_level("ERROR"),
        LiveGateway(create_app(settings, Backends.from_settings(settings))) as gateway,
    ):
        _short_body(gateway.port).close()
        said = ""
        deadline = time.monotonic() + 5  # a hang guard: the server notices at once
        while "gateway_client_gone" not in said and time.monotonic() < deadline:
            time.sleep(0.05)
            said += capsys.readouterr().out
    assert "gateway_client_gone" in said
    assert "gateway_unexpected_error" not in said
    assert [record.getMessage() for record in caplog.records if record.levelname == "ERROR"] == []


def test_a_body_that_stops_short_is_a_408_not_a_connection_held_for_good(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(bodies, "BODY_SECONDS", 0.5)
    settings = gateway_settings("127.0.0.1:1")
    app = create_app(settings, Backends.from_settings(settings))
    with LiveGateway(app) as gateway, _short_body(gateway.port) as connection:
        status_line = connection.makefile("rb").readline()
    assert status_line.split()[1] == b"408"
    # /openapi.json says so for every route that takes a body.
    for path, item in app.state.openapi["paths"].items():
        for method, operation in item.items():
            if "requestBody" in operation:
                assert "408" in operation["responses"], f"{method.upper()} {path}"


def test_a_head_sent_a_line_at_a_time_is_cut_off_at_its_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A header line now and then kept a connection for ever (no account needed): one
    client held every file descriptor. The head has a deadline as a whole; a request whose
    head arrives in time is served, and so is the next one on its kept-alive connection."""
    monkeypatch.setattr(connections, "HEAD_SECONDS", 1.0)
    settings = gateway_settings("127.0.0.1:1")
    app = create_app(settings, Backends.from_settings(settings))
    with LiveGateway(app) as gateway:
        slow = socket.create_connection(("127.0.0.1", gateway.port), timeout=5)
        slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        for _ in range(20):  # a header line every 0.2 s: each byte restarted uvicorn's timer
            time.sleep(0.2)
            try:
                slow.sendall(b"X-Slow: 1\r\n")
            except OSError:
                break
        assert slow.recv(1024) == b"", "the slow head's connection was not closed"

        kept = socket.create_connection(("127.0.0.1", gateway.port), timeout=5)
        reader = kept.makefile("rb")
        for _ in range(2):  # two requests on one connection, each head sent whole at once
            kept.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert reader.readline().split()[1] == b"200"
            length = 0
            while (line := reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.partition(b":")
                if name.lower() == b"content-length":
                    length = int(value)
            reader.read(length)
            time.sleep(0.3)  # kept alive, under the deadline: the next head may still come
        kept.close()


def test_an_upgrade_to_websocket_is_an_ordinary_request_and_no_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The gateway serves no WebSockets: uvicorn logged two warnings for each request asking
    to upgrade (no account needed). Now it is answered as any request, on a connection
    that serves the next one."""
    upgrade = {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13"}
    lines = "".join(f"{name}: {value}\r\n" for name, value in upgrade.items()).encode()
    settings = gateway_settings("127.0.0.1:1")
    with (
        caplog.at_level("WARNING"),
        LiveGateway(create_app(settings, Backends.from_settings(settings))) as gateway,
    ):
        asked = [
            _http("GET", path).replace(b"\r\n\r\n", b"\r\n" + lines + b"\r\n", 1)
            for path in ("/healthz", "/api/operations", "/nowhere", "/static/app.js")
        ]
        statuses = _exchange(gateway.port, [*asked, _http("GET", "/healthz")])
        answer = httpx.get(f"{gateway.url}/api/events", headers=upgrade)
    assert statuses == [200, 401, 404, 200, 200]
    expect_problem(answer, 401, "unauthenticated")
    assert [record.getMessage() for record in caplog.records] == []


def test_a_content_length_of_thousands_of_digits_is_too_large(services: Services) -> None:
    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            for declared in ("9" * 5000, "0" * 5000 + "5"):
                request = client.build_request("POST", "/auth/login", content=b'{"token": "x"}')
                request.headers["Content-Length"] = declared
                response = await client.send(request)
                if declared.lstrip("0") == "5":
                    assert response.status_code != 500
                else:
                    expect_problem(response, 413, "payload_too_large")

    run(scenario())


def _padded(body: str, size: int) -> bytes:
    """``body`` (a JSON object) with blanks before its closing brace: ``size`` bytes."""
    return body[:-1].encode() + b" " * (size - len(body)) + b"}"


def test_a_body_of_exactly_the_cap_is_read_and_one_byte_more_is_a_413(
    services: Services,
) -> None:
    """The cap is a size a body may have, whether it says its length or is sent in chunks."""
    cap = bodies.DEFAULT_MAX_BYTES

    async def chunks(content: bytes) -> Any:  # no Content-Length: counted as it arrives
        for start in range(0, len(content), 4096):
            yield content[start : start + 4096]

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            headers = {**JSON, **bearer("alice")}
            for streamed in (False, True):
                for size, status in ((cap, 200), (cap + 1, 413)):
                    content = _padded('{"privacy": "external_allowed"}', size)
                    sent = chunks(content) if streamed else content
                    response = await client.put("/api/settings/ai", content=sent, headers=headers)
                    assert response.status_code == status, (streamed, size, response.text)
                    if status == 413:
                        expect_problem(response, 413, "payload_too_large")

    run(scenario())


# ---- null and surrogates --------------------------------------------------------------------


def test_null_for_a_field_is_refused_by_name_not_read_as_absent(services: Services) -> None:
    job = create_job(services.workspace, "alice")
    cv = create_cv(services.workspace, "alice")
    cases: list[tuple[str, str, dict[str, Any], str]] = [
        ("PUT", "/api/settings/ai", {"ai_enabled": None}, "ai_enabled"),
        ("PUT", "/api/settings/ai", {"privacy": None}, "privacy"),
        ("PUT", "/api/settings/ai", {"ai_enabled": True, "privacy": None}, "privacy"),
        ("POST", f"/api/jobs/{job}/strategy-snapshot", {"attachment_id": None}, "attachment_id"),
        ("POST", f"/api/attachments/{cv}/cv-review", {"job_id": None}, "job_id"),
        ("POST", "/api/jobs", {"title": "T", "company": None, "description": "D"}, "company"),
        ("POST", "/api/jobs", {"title": None, "description": "D"}, "title"),
        ("POST", "/api/attachments", {"kind": "cv", "filename": None, "text": "x"}, "filename"),
        ("POST", "/auth/login", {"token": None}, "token"),
    ]

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            await client.put(
                "/api/settings/ai", json={"privacy": "external_allowed"}, headers=bearer("alice")
            )
            for method, path, body, name in cases:
                response = await client.request(method, path, json=body, headers=bearer("alice"))
                problem = expect_problem(response, 400, "invalid_argument")
                assert problem["field"] == name, (path, problem)
                assert problem["detail"].startswith(f"{name} must not be null"), problem
            # Nothing changed: null did not mean "keep", and did not mean "none" either.
            now = await client.get("/api/settings/ai", headers=bearer("alice"))
            assert now.json()["privacy"] == "external_allowed"
            listed = await client.get("/api/jobs", headers=bearer("alice"))
            assert len(listed.json()["items"]) == 1
            operations = await client.get("/api/operations", headers=bearer("alice"))
            assert operations.json()["items"] == []

    run(scenario())


def test_a_lone_surrogate_anywhere_is_a_400(services: Services) -> None:
    job = create_job(services.workspace, "alice")
    cases = [
        ("POST", "/api/jobs", '{"title": "T\\ud800", "description": "x"}', "title"),
        ("POST", "/api/attachments", '{"kind": "cv", "filename": "\\udfff", "text": "x"}', None),
        ("POST", f"/api/jobs/{job}/strategy-snapshot", '{"attachment_id": "a\\ud800"}', None),
        # As a field name: the problem that names it must still be encodable.
        ("POST", "/auth/login", '{"\\ud800": 1}', "\\ud800"),
        ("PUT", "/api/settings/ai", '{"x\\udc00y": true}', "x\\udc00y"),
    ]

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            for method, path, body, name in cases:
                response = await client.request(
                    method, path, content=body, headers={**JSON, **bearer("alice")}
                )
                assert response.status_code == 400, (body, response.text)
                problem = response.json()
                assert problem["code"] in {"invalid_argument", "unknown_field"}, problem
                if name is not None:
                    assert problem["field"] == name

    run(scenario())


# ---- methods --------------------------------------------------------------------------------


def test_a_405_allows_every_method_the_path_serves(services: Services) -> None:
    app = make_app(services.target)
    document = app.state.openapi

    async def scenario() -> None:
        async with gateway_client(app) as client:
            options = await client.options("/api/settings/ai", headers=bearer("alice"))
            expect_problem(options, 405, "method_not_allowed")
            assert options.headers["allow"] == "GET, HEAD, PUT"
            for path, item in document["paths"].items():
                served = {method.upper() for method in item}
                unserved = sorted({"GET", "PUT", "POST", "DELETE", "PATCH"} - served)
                concrete = path.replace("{id}", "f" * 32).replace("{path}", "app.js")
                if path.startswith("/static/"):
                    continue  # files: the static app's own answers
                for method in unserved:
                    response = await client.request(method, concrete, headers=bearer("alice"))
                    where = f"{method} {path}"
                    assert response.status_code == 405, where
                    allowed = {m.strip() for m in response.headers["allow"].split(",")}
                    expected = served | ({"HEAD"} if "GET" in served else set())
                    assert allowed == expected, where

    run(scenario())


# ---- static files ---------------------------------------------------------------------------


def test_a_static_file_is_sent_whole_whatever_range_asks() -> None:
    """Starlette answered a range it could not serve in text/plain (416, or 400 "Range
    header: ..."): off SPEC §5. The files are small; each is sent whole, saying so."""
    app = make_app("127.0.0.1:1")
    ranges = ["bytes=99999999-", "bytes=abc", "bytes=5-1", "bytes=0-3", "bytes=0-1,2-3", "x"]

    async def scenario() -> None:
        async with gateway_client(app) as client:
            for path in ("/static/app.js", "/favicon.ico"):
                whole = await client.get(path)
                assert whole.status_code == 200
                for asked in ranges:
                    response = await client.get(path, headers={"Range": asked})
                    assert response.status_code == 200, (path, asked, response.text)
                    assert response.content == whole.content, (path, asked)
                    assert response.headers["cache-control"] == "no-cache"
                    assert "content-range" not in response.headers
                head = await client.head(path, headers={"Range": "bytes=abc"})
                assert head.status_code == 200
                assert whole.headers["accept-ranges"] == "none"
            etag = (await client.get("/static/app.js")).headers["etag"]
            again = {"If-None-Match": etag, "Range": "bytes=abc"}
            unchanged = await client.get("/static/app.js", headers=again)
            assert unchanged.status_code == 304
            assert unchanged.headers["cache-control"] == "no-cache"

    run(scenario())


# ---- the document describes the server's rules -----------------------------------------------


def _schema(document: dict[str, Any], name: str) -> dict[str, Any]:
    schema: dict[str, Any] = document["components"]["schemas"][name]
    return schema


def _matches(schema: dict[str, Any], value: str) -> bool:
    """Whether ``value`` is valid for a string schema (pattern as Python reads it)."""
    if len(value) < schema.get("minLength", 0) or len(value) > schema.get("maxLength", 10**9):
        return False
    return re.search(schema.get("pattern", ""), value) is not None


TEXT_SAMPLES = [
    "Engineer",
    " Engineer ",
    "\tEngineer\r\n",
    "",
    " ",
    "\t\n",
    "\u00a0",
    "\u0085",
    "a\tb",
    "a\x0bb",
    "\x0b",
    "a\x00",
    "a\x7f",
    "a\x9b31mRED",  # C1: the terminal's control sequence introducer
    "a\u2028b",  # a line separator: a line break in a one-line field
    "\u200b\ufeff",  # nothing that shows
    "a\u200bb",
    "été",
    "line one\nline two",
]


def test_the_document_states_the_text_rules_the_server_applies(services: Services) -> None:
    """For each text member, a sample is schema-valid exactly when the server takes it."""
    app = make_app(services.target)
    document = app.state.openapi
    members = [
        ("NewJob", "title", "/api/jobs", {"title": "T", "description": "D"}),
        ("NewJob", "company", "/api/jobs", {"title": "T", "description": "D"}),
        ("NewJob", "description", "/api/jobs", {"title": "T", "description": "D"}),
        (
            "NewAttachment",
            "filename",
            "/api/attachments",
            {"kind": "cv", "filename": "f", "text": "t"},
        ),
        ("NewAttachment", "text", "/api/attachments", {"kind": "cv", "filename": "f", "text": "t"}),
    ]
    disagreements: list[str] = []

    async def scenario() -> None:
        async with gateway_client(app) as client:
            for schema_name, member, path, valid in members:
                schema = _schema(document, schema_name)["properties"][member]
                for sample in TEXT_SAMPLES:
                    response = await client.post(
                        path, json={**valid, member: sample}, headers=bearer("alice")
                    )
                    accepted = response.status_code == 201
                    if accepted != _matches(schema, sample):
                        disagreements.append(
                            f"{schema_name}.{member} {sample!r}: server {response.status_code}"
                        )
            login = _schema(document, "LoginRequest")["properties"]["token"]
            for sample in ("", " ", "\n", "\x00", token("alice"), f" {token('alice')}\n"):
                response = await client.post("/auth/login", json={"token": sample})
                refused_as_input = response.status_code == 400
                if refused_as_input == _matches(login, sample):
                    disagreements.append(f"login token {sample[:8]!r}: {response.status_code}")

    run(scenario())
    assert disagreements == []


def _parameters(document: dict[str, Any], path: str, method: str) -> dict[str, Any]:
    return {p["name"]: p for p in document["paths"][path][method].get("parameters", ())}


def test_the_document_states_the_page_token_and_id_patterns(services: Services) -> None:
    document = make_app(services.target).state.openapi
    for path, item in document["paths"].items():
        for method, _operation in item.items():
            parameters = _parameters(document, path, method)
            if "page_token" in parameters:
                pattern = parameters["page_token"]["schema"]["pattern"]
                assert re.fullmatch(pattern, "eyJjIjoiMjAyNiJ9")
                assert not re.search(pattern, "!!")
            if "id" in parameters:
                schema = parameters["id"]["schema"]
                assert schema["minLength"] == 1
                assert re.search(schema["pattern"], "f" * 32)
                assert not re.search(schema["pattern"], "../x")


def test_get_strategy_snapshot_documents_and_checks_attachment_id(services: Services) -> None:
    job = create_job(services.workspace, "alice")
    cv = create_cv(services.workspace, "alice")
    app = make_app(services.target)
    parameters = _parameters(app.state.openapi, "/api/jobs/{id}/strategy-snapshot", "get")
    assert parameters["attachment_id"]["in"] == "query"
    assert parameters["attachment_id"]["required"] is False
    assert (
        "400" in app.state.openapi["paths"]["/api/jobs/{id}/strategy-snapshot"]["get"]["responses"]
    )
    path = f"/api/jobs/{job}/strategy-snapshot"

    async def scenario() -> None:
        async with gateway_client(app) as client:
            for query in (f"?attachment_id={cv}", "?attachment_id=", ""):
                response = await client.get(path + query, headers=bearer("alice"))
                assert response.status_code == 200, (query, response.text)
                assert response.json() == {"snapshot": None, "operation": None, "draft": None}
            for query, field in (
                ("?attachment_id=..%2Fx", "attachment_id"),
                (f"?attachment_id={'a' * 65}", "attachment_id"),
                (f"?attachment_id={cv}&attachment_id={cv}", "attachment_id"),
                ("?job_id=x", "job_id"),
            ):
                response = await client.get(path + query, headers=bearer("alice"))
                assert response.status_code == 400, query
                assert response.json()["field"] == field

    run(scenario())


# ---- a schema-driven fuzz -----------------------------------------------------------------

# Left out of the positive cases. A page token is opaque: a made-up one is rightly a 400.
# ``task_type`` of GET /api/operations: its schema in ``gateway/operations.py`` lacks the
# pattern the server applies (``bounds.task_type``: ``^[a-z0-9._-]*$``); drop it from
# here once that module states it.
UNDESCRIBABLE_QUERY: dict[str, tuple[str, ...]] = {
    "GET /api/operations": ("page_token",),
    "GET /api/jobs": ("page_token",),
    "GET /api/attachments": ("page_token",),
    "GET /api/notifications": ("page_token",),
    # A duration's bounds (more than 0, at most bounds.OLDER_THAN_MAX) are no pattern.
    "GET /console/api/operations": ("page_token", "older_than"),
}
FUZZ_EXAMPLES = 250
FUZZ_SECONDS = 60.0


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=str)
def test_a_schema_driven_fuzz_finds_no_5xx_and_no_answer_off_the_schema(
    services: Services, mode: GenerationMode
) -> None:
    """schemathesis against the app in-process, signed in: bounded in examples and time.

    Checks, for schema-valid requests and for schema-violating ones: no 5xx, and every
    answer in the document (status, content type, headers, body schema). A schema-valid
    request must also be accepted (2xx, or 401/403/404/409/429: a random id is nobody's,
    a Free user may not start an analysis), but for the query parameters of
    ``UNDESCRIBABLE_QUERY``.
    """
    create_job(services.workspace, "alice")
    # schemathesis's in-process client names the server `testserver` in every Host header.
    app = make_app(services.target, gateway_allowed_hosts="testserver")
    # The event stream never ends by itself: an in-process call would wait for ever.
    # tests/integration/test_gateway_events.py sends it hostile input over a live server.
    schema = schemathesis.openapi.from_asgi("/openapi.json", app).exclude(path="/api/events")
    checks = [
        not_a_server_error,
        status_code_conformance,
        content_type_conformance,
        response_headers_conformance,
        response_schema_conformance,
    ]
    if mode.is_positive:
        checks.append(positive_data_acceptance)
    sent: Counter[int] = Counter()
    failures: list[str] = []
    started = time.monotonic()

    @settings(
        max_examples=FUZZ_EXAMPLES,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=schema.as_strategy(generation_mode=mode))
    def fuzz(case: Case[Any]) -> None:
        if time.monotonic() - started > FUZZ_SECONDS:
            return
        if mode.is_positive and isinstance(case.query, dict):
            for name in UNDESCRIBABLE_QUERY.get(case.operation.label, ()):
                case.query.pop(name, None)
        response = case.call(headers={"Authorization": f"Bearer {token('alice')}"})
        sent[response.status_code] += 1
        try:
            case.validate_response(response, checks=checks)
        except (Exception, BaseExceptionGroup) as failure:  # schemathesis's FailureGroup
            answer = f"{case.operation.label} -> {response.status_code} {response.text[:300]}"
            failures.append(f"{answer}: {failure}"[:1200])

    fuzz()
    total = sum(sent.values())
    fives = sum(count for status, count in sent.items() if status >= 500)
    report(f"fuzz ({mode}): {total} requests, {fives} 5xx, statuses {dict(sorted(sent.items()))}")
    for failure in failures:
        print(failure)
    assert total >= 50
    assert failures == []
