"""Bad input is the client's problem: every case answers 4xx problem+json, never 5xx."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import httpx
import pytest
from sqlalchemy import func, select

from durable_ops.api.ai_admission.v1 import ai_admission_pb2 as admission_pb
from durable_ops.api.workspace.v1 import workspace_pb2 as workspace_pb
from durable_ops.gateway import operations
from durable_ops.gateway.app import create_app
from durable_ops.gateway.backends import Backends
from durable_ops.gateway.pagination import PAGING_PARAMETERS
from durable_ops.model import bounds
from durable_ops.model.scope import Role
from durable_ops.model.tasks import TASKS
from durable_ops.storage.schema import Attachment, Job, UserOperation
from tests.integration.test_gateway_wording import reads_as_a_sentence
from tests.support.clock import ManualClock
from tests.support.gateway import (
    BASE_URL,
    LiveGateway,
    bearer,
    create_operation,
    gateway_client,
    gateway_settings,
    make_app,
    run,
    token,
)
from tests.support.grpc_services import Services, metadata, running_services
from tests.support.operations_client import expect_failure
from tests.support.stored import scalar
from tests.support.workspace_client import CV_TEXT, JOB_TEXT, create_cv, create_job, entitle

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
    retry = f"/api/operations/{operation_id}/retry"
    listing = "/api/operations"
    return [
        # bodies
        Case("malformed json", "POST", cancel, 400, "malformed_json", b'{"a":', JSON),
        Case("not utf-8", "POST", cancel, 400, "malformed_json", b"\xff\xfe{}", JSON),
        Case("array body", "POST", cancel, 400, "invalid_body", b"[]", JSON),
        Case("string body", "POST", cancel, 400, "invalid_body", b'"cancel"', JSON),
        Case("deep nesting", "POST", cancel, 400, "invalid_body", b"[" * 400 + b"]" * 400, JSON),
        Case("unknown field", "POST", cancel, 400, "unknown_field", b'{"force": true}', JSON),
        # A retry takes no body either: checked before the retry is asked for.
        Case("retry with a field", "POST", retry, 400, "unknown_field", b'{"force": true}', JSON),
        Case(
            "retry not json",
            "POST",
            retry,
            415,
            "unsupported_media_type",
            b"force=1",
            {"Content-Type": "application/x-www-form-urlencoded"},
        ),
        Case(
            "lone surrogate",
            "POST",
            "/api/jobs",
            400,
            "invalid_argument",
            b'{"title": "a\\ud800b", "description": "x"}',
            JSON,
        ),
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
        # At the cap a token is read (and refused as no token of ours); past it, never.
        Case(
            "login token at the cap",
            "POST",
            "/auth/login",
            401,
            "unauthenticated",
            json.dumps({"token": "x" * 4096}).encode(),
            JSON,
            authenticated=False,
        ),
        Case(
            "login token past the cap",
            "POST",
            "/auth/login",
            400,
            "invalid_argument",
            json.dumps({"token": "x" * 4097}).encode(),
            JSON,
            authenticated=False,
        ),
        *[
            Case(
                f"login token {blank!r}",
                "POST",
                "/auth/login",
                400,
                "invalid_argument",
                json.dumps({"token": blank}).encode(),
                JSON,
                authenticated=False,
            )
            for blank in ("", "   ")
        ],
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
        Case(
            "login huge integer",
            "POST",
            "/auth/login",
            400,
            "number_too_long",
            b'{"token": ' + b"7" * 5000 + b"}",
            JSON,
            authenticated=False,
        ),
        Case(
            "login surrogate field name",
            "POST",
            "/auth/login",
            400,
            "unknown_field",
            b'{"\\ud800": "x"}',
            JSON,
            authenticated=False,
        ),
        Case(
            "null setting",
            "PUT",
            "/api/settings/ai",
            400,
            "invalid_argument",
            b'{"ai_enabled": null}',
            JSON,
        ),
        # A boolean is true or false: 1 and 0 are numbers, never read as either.
        *[
            Case(
                f"setting as {number.decode()}",
                "PUT",
                "/api/settings/ai",
                400,
                "invalid_argument",
                b'{"ai_enabled": %s}' % number,
                JSON,
            )
            for number in (b"1", b"0", b"1.0")
        ],
        Case("options settings", "OPTIONS", "/api/settings/ai", 405, "method_not_allowed"),
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
        # A lone surrogate in the id reached the database's driver (INTERNAL, 503).
        *[
            Case(
                f"{listed} token surrogate id",
                "GET",
                f"{listed}?page_token={_token({'c': '2026-01-01T00:00:00Z', 'i': chr(0xD800)})}",
                400,
                "invalid_argument",
            )
            for listed in ("/api/operations", "/api/jobs", "/api/notifications", "/api/attachments")
        ],
        # filters and unknown parameters
        Case("unknown state", "GET", f"{listing}?state=done", 400, "invalid_argument"),
        Case("state nul", "GET", f"{listing}?state=%00", 400, "control_character"),
        Case("state control", "GET", f"{listing}?state=%01", 400, "control_character"),
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
            "POST",
            "/auth/dev-login",
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
                elif not reads_as_a_sentence(problem):
                    failures.append(f"{case.name}: not a full sentence: {problem['detail']!r}")
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


# Control characters and line breaks: C0, ESC opening a terminal sequence, C1's NEL, and
# U+2028 (a line separator).
CONTROL_VALUES = ("\x01", "model\x00error", "a\nb", "\x1b[2J", "x\x85", "x\u2028")


def test_a_control_character_in_any_query_parameter_is_refused_by_name(
    services: Services,
) -> None:
    """One rule for every route's query string (``pagination.query_params``), as the
    console has it: ``?state=%01`` was a 400 ``invalid_argument``, ``?page_token=%01``
    "is not a token this server issued"."""
    operation = create_operation(services, "alice")
    reading = [
        ("/api/operations", operations.LIST_PARAMETERS),
        (f"/api/operations/{operation.id}:wait", ("timeout", "seen")),
        *[(listed, PAGING_PARAMETERS) for listed in ("/api/jobs", "/api/attachments")],
        ("/api/notifications", PAGING_PARAMETERS),
        *[
            (task.path.format(id="f" * 32), (task.context.reference_field,))
            for task in TASKS
            if task.context is not None
        ],
    ]
    failures: list[str] = []

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            for path, names in reading:
                for name in names:
                    for value in CONTROL_VALUES:
                        answer = await client.get(
                            path, params={name: value}, headers=bearer("alice")
                        )
                        found = (answer.status_code, answer.json().get("code"))
                        if found != (400, "control_character") or answer.json()["field"] != name:
                            failures.append(f"{path}?{name}={value!r}: {answer.text[:200]}")

    run(scenario())
    assert failures == []


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
    ("POST", "/auth/dev-login"),
    ("POST", "/auth/login"),
    ("POST", "/auth/logout"),
]
BODIES: list[tuple[bytes | None, dict[str, str]]] = [
    (None, {}),
    (b"{", JSON),
    (b'{"token": {"a": [1, 2]}}', JSON),
    (b"\x00\x01\x02", {"Content-Type": "application/octet-stream"}),
    (b'{"page_size": 5}', {"Content-Type": "application/json; charset=latin-1"}),
    # A same-origin form that is not UTF-8: reaches dev-login's form reader.
    (b"user=%ff%fe", {"Content-Type": "application/x-www-form-urlencoded", "Origin": BASE_URL}),
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


# ---- control characters in text -------------------------------------------------------------

# Every C0 control and DEL. Tab, LF and CR are text in a field that may span lines.
CONTROLS = [chr(code) for code in (*range(0x20), 0x7F)]
LINE_BREAKS = ["\t", "\n", "\r"]


@dataclass(frozen=True)
class TextField:
    """One text field a write route accepts: a member of its JSON body, or a header."""

    method: str
    path: str  # as the OpenAPI document spells it
    name: str
    multi_line: bool = False
    header: bool = False

    def __str__(self) -> str:
        return f"{self.method} {self.path} {self.name}"


TEXT_FIELDS = [
    TextField("POST", "/api/jobs", "title"),
    TextField("POST", "/api/jobs", "company"),
    TextField("POST", "/api/jobs", "description", multi_line=True),
    TextField("POST", "/api/attachments", "kind"),
    TextField("POST", "/api/attachments", "filename"),
    TextField("POST", "/api/attachments", "text", multi_line=True),
    TextField("PUT", "/api/settings/ai", "privacy"),
    TextField("POST", "/api/jobs/{id}/strategy-snapshot", "attachment_id"),
    TextField("POST", "/api/jobs/{id}/strategy-snapshot", "Idempotency-Key", header=True),
    TextField("POST", "/api/jobs/{id}/strategy-snapshot", "not_before"),
    TextField("POST", "/api/attachments/{id}/cv-review", "job_id"),
    TextField("POST", "/api/attachments/{id}/cv-review", "not_before"),
    TextField("POST", "/api/attachments/{id}/cv-review", "Idempotency-Key", header=True),
    TextField("POST", "/auth/login", "token"),
    TextField("POST", "/console/sign-in", "link"),
]


@dataclass(frozen=True)
class Valid:
    """A request each route accepts, to put one bad character into."""

    job_id: str
    cv_id: str

    def path(self, text_field: TextField) -> str:
        subject = self.cv_id if "/attachments/" in text_field.path else self.job_id
        return text_field.path.format(id=subject)

    def body(self, text_field: TextField) -> dict[str, str]:
        by_path = {
            "/api/jobs": {"title": "Engineer", "company": "Acme", "description": JOB_TEXT},
            "/api/attachments": {"kind": "cv", "filename": "cv.txt", "text": CV_TEXT},
            "/api/settings/ai": {"privacy": "local_only"},
            "/api/jobs/{id}/strategy-snapshot": {"attachment_id": self.cv_id},
            "/api/attachments/{id}/cv-review": {"job_id": self.job_id},
            "/auth/login": {"token": token("alice")},
            "/console/sign-in": {"link": "a" * 43},
        }
        body = dict(by_path[text_field.path])
        if text_field.name == "not_before":  # optional: a schedule an hour ahead
            soon = datetime.now(UTC) + timedelta(hours=1)
            body["not_before"] = soon.isoformat()
        return body


def _with(value: str, character: str) -> str:
    """``value`` with ``character`` inside it, not at an edge (a line's edges are trimmed)."""
    return value[:1] + character + value[1:]


async def _send_text(
    client: httpx.AsyncClient, valid: Valid, text_field: TextField, character: str, *, raw: bool
) -> httpx.Response:
    headers = {**bearer("alice"), "Origin": BASE_URL}  # a same-origin write, as pages send
    body = valid.body(text_field)
    if text_field.header:
        headers["Idempotency-Key"] = _with("click-42", character)
    else:
        body[text_field.name] = _with(body[text_field.name], character)
    content = json.dumps(body).encode()
    if raw:
        # Unescaped, as some clients send it: still refused by name, not as malformed JSON.
        content = content.replace(json.dumps(character)[1:-1].encode(), character.encode())
    return await client.request(
        text_field.method,
        valid.path(text_field),
        content=content,
        headers={**headers, **JSON},
    )


def _stored_rows(services: Services) -> list[int]:
    """How many jobs, attachments and operations there are, for every owner."""
    return [
        int(scalar(services.db, select(func.count()).select_from(table)) or 0)
        for table in (Job, Attachment, UserOperation)
    ]


@pytest.mark.parametrize("text_field", TEXT_FIELDS, ids=str)
def test_a_control_character_in_a_text_field_is_refused_by_name(
    services: Services, text_field: TextField
) -> None:
    valid = Valid(create_job(services.workspace, "alice"), create_cv(services.workspace, "alice"))
    refused = [c for c in CONTROLS if not (text_field.multi_line and c in LINE_BREAKS)]
    before = _stored_rows(services)
    failures: list[str] = []

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            for character in refused:
                for raw in (False, True):
                    response = await _send_text(client, valid, text_field, character, raw=raw)
                    problem = response.json()
                    expected = (400, "control_character", text_field.name)
                    found = (response.status_code, problem.get("code"), problem.get("field"))
                    where = f"U+{ord(character):04X}{' raw' if raw else ''}"
                    if text_field.header:  # bytes, not text: one answer for any byte
                        if (*found, problem["detail"]) != NOT_A_KEY:
                            failures.append(f"{where}: {problem}")
                    elif found != expected:
                        failures.append(f"{where}: {found}")
                    elif not problem["detail"].startswith(f"{text_field.name} must not contain"):
                        failures.append(f"{where}: {problem['detail']!r}")
                    elif f"U+{ord(character):04X}" not in problem["detail"]:
                        failures.append(f"{where}: the detail does not say which: {problem}")
                    elif not reads_as_a_sentence(problem):
                        failures.append(f"{where}: not a sentence: {problem['detail']!r}")
            settings = await client.get("/api/settings/ai", headers=bearer("alice"))
            assert settings.json()["privacy"] == "local_only"

    run(scenario())
    assert failures == []
    assert _stored_rows(services) == before  # nothing was saved or started


MULTI_LINE_FIELDS = [text_field for text_field in TEXT_FIELDS if text_field.multi_line]


@pytest.mark.parametrize("text_field", MULTI_LINE_FIELDS, ids=str)
def test_tab_and_line_breaks_are_kept_in_multi_line_text(
    services: Services, text_field: TextField
) -> None:
    valid = Valid("", "")
    resource = text_field.path

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            for raw in (False, True):
                body = valid.body(text_field)
                body[text_field.name] = "First line\r\n\tindented\nlast line"
                content = json.dumps(body).encode()
                if raw:
                    content = content.replace(b"\\r", b"\r").replace(b"\\n", b"\n")
                    content = content.replace(b"\\t", b"\t")
                created = await client.post(
                    resource, content=content, headers={**bearer("alice"), **JSON}
                )
                assert created.status_code == 201, created.text
                fetched = await client.get(created.headers["location"], headers=bearer("alice"))
                assert fetched.json()[text_field.name] == body[text_field.name]

    run(scenario())


def test_a_single_line_keeps_no_pasted_line_break_around_it(services: Services) -> None:
    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            job = {"title": "\tEngineer\r\n", "company": " Acme\n", "description": JOB_TEXT}
            created = await client.post("/api/jobs", json=job, headers=bearer("alice"))
            assert created.status_code == 201, created.text
            assert (created.json()["title"], created.json()["company"]) == ("Engineer", "Acme")
            # A token pasted from a terminal ends with a line break; it still signs in.
            pasted = {"token": token("alice") + "\n"}
            assert (await client.post("/auth/login", json=pasted)).status_code == 200

    run(scenario())


def test_the_text_fields_cover_every_write_route() -> None:
    """Each string a write route takes (body member or header) is in TEXT_FIELDS."""

    async def scenario() -> dict[str, Any]:
        async with gateway_client(make_app("127.0.0.1:1")) as client:
            document: dict[str, Any] = (await client.get("/openapi.json")).json()
            return document

    document = run(scenario())
    schemas = document["components"]["schemas"]

    def resolved(schema: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in schema:
            schema = schemas[schema["$ref"].rsplit("/", 1)[-1]]
        return schema

    declared: set[tuple[str, str, str]] = set()
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method == "get":  # a read's headers (Last-Event-ID) are tested with their route
                continue
            body = operation.get("requestBody", {}).get("content", {}).get("application/json")
            properties = resolved(body["schema"]).get("properties", {}) if body else {}
            declared |= {
                (method.upper(), path, name)
                for name, schema in properties.items()
                if resolved(schema).get("type") == "string"
            }
            declared |= {
                (method.upper(), path, parameter["name"])
                for parameter in operation.get("parameters", [])
                if parameter["in"] == "header" and parameter["schema"].get("type") == "string"
            }
    assert declared == {(f.method, f.path, f.name) for f in TEXT_FIELDS}


GRPC_TEXT_FIELDS = [
    ("CreateJob", "title", False),
    ("CreateJob", "company", False),
    ("CreateJob", "description", True),
    ("CreateAttachment", "filename", False),
    ("CreateAttachment", "text", True),
]


def _valid_create(method: str) -> Any:
    """A request ``method`` (CreateJob, CreateAttachment) accepts, to change one field of."""
    if method == "CreateJob":
        return workspace_pb.CreateJobRequest(title="Engineer", company="Acme", description=JOB_TEXT)
    return workspace_pb.CreateAttachmentRequest(kind="cv", filename="cv.txt", text=CV_TEXT)


@pytest.mark.parametrize(("method", "name", "multi_line"), GRPC_TEXT_FIELDS)
def test_the_workspace_service_refuses_control_characters_too(
    services: Services, method: str, name: str, multi_line: bool
) -> None:
    """Defence in depth: a caller that is not the gateway meets the same rule."""
    call = getattr(services.workspace, method)
    failures: list[str] = []
    for character in CONTROLS:
        request = _valid_create(method)
        setattr(request, name, _with(getattr(request, name), character))
        try:
            call(request, metadata=metadata(Role.GATEWAY, "alice"))
        except grpc.RpcError as error:
            trailers = {item.key: str(item.value) for item in error.trailing_metadata() or ()}
            found = (error.code(), trailers.get("x-error-code"), trailers.get("x-error-field"))
            if found != (grpc.StatusCode.INVALID_ARGUMENT, "control_character", name):
                failures.append(f"U+{ord(character):04X}: {found}")
        else:
            if not (multi_line and character in LINE_BREAKS):
                failures.append(f"U+{ord(character):04X}: accepted")
    assert failures == []


GRPC_TEXT_BOUNDS = [
    ("CreateJob", "title", bounds.JOB_TITLE_MAX),
    ("CreateJob", "company", bounds.JOB_COMPANY_MAX),
    ("CreateJob", "description", bounds.JOB_DESCRIPTION_MAX),
    ("CreateAttachment", "filename", bounds.ATTACHMENT_FILENAME_MAX),
    ("CreateAttachment", "text", bounds.ATTACHMENT_TEXT_MAX),
]


@pytest.mark.parametrize(("method", "name", "bound"), GRPC_TEXT_BOUNDS)
def test_the_workspace_service_keeps_each_length_bound_too(
    services: Services, method: str, name: str, bound: int
) -> None:
    """Defence in depth, and the bound the column is as wide as: a caller that is not the
    gateway stores a text of exactly the bound whole, and one character more is refused by
    name, storing nothing."""
    alice = metadata(Role.GATEWAY, "alice")
    call = getattr(services.workspace, method)
    longest = _valid_create(method)
    setattr(longest, name, "x" * bound)
    created = call(longest, metadata=alice)
    stored: workspace_pb.Job | workspace_pb.Attachment
    if method == "CreateJob":
        stored = services.workspace.GetJob(
            workspace_pb.GetJobRequest(job_id=created.id), metadata=alice
        )
    else:
        read = workspace_pb.GetAttachmentRequest(attachment_id=created.id)
        stored = services.workspace.GetAttachment(read, metadata=alice)
    assert getattr(stored, name) == "x" * bound
    before = _stored_rows(services)
    past = _valid_create(method)
    setattr(past, name, "x" * (bound + 1))
    refused = expect_failure(
        lambda: call(past, metadata=alice),
        grpc.StatusCode.INVALID_ARGUMENT,
        "invalid_argument",
        field=name,
    )
    assert refused.details == f"{name}: must be at most {bound:,} characters"
    assert _stored_rows(services) == before


def test_the_workspace_service_stores_only_an_attachment_kind_it_knows(
    services: Services,
) -> None:
    for kind in ("pdf", "CV", ""):
        request = workspace_pb.CreateAttachmentRequest(kind=kind, filename="cv.txt", text=CV_TEXT)
        refused = expect_failure(
            lambda request=request: services.workspace.CreateAttachment(  # type: ignore[misc]
                request, metadata=metadata(Role.GATEWAY, "alice")
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            "invalid_argument",
            field="kind",
        )
        assert refused.details == 'kind: must be "cv"', kind
    assert _stored_rows(services) == [0, 0, 0]


def test_admission_refuses_a_control_character_in_the_idempotency_key(services: Services) -> None:
    job = create_job(services.workspace, "alice")
    for character in CONTROLS:
        request = admission_pb.AdmitRequest(
            task_type="strategy.snapshot",
            subject_id=job,
            idempotency_key=_with("click-42", character),
        )
        with pytest.raises(grpc.RpcError) as caught:
            services.admission.Admit(request, metadata=metadata(Role.GATEWAY, "alice"))
        trailers = {item.key: str(item.value) for item in caught.value.trailing_metadata() or ()}
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert (trailers["x-error-code"], trailers["x-error-field"]) == (
            "control_character",
            "idempotency_key",
        )


NOT_A_KEY = (
    400,
    "invalid_argument",
    "Idempotency-Key",
    "Idempotency-Key must be printable ASCII without spaces.",
)


def test_an_idempotency_key_outside_printable_ascii_gets_one_answer(services: Services) -> None:
    """Over HTTP a header is bytes, which the server reads as latin-1: UTF-8's "ключ" was
    refused as holding the control character U+008E, b"\\xff\\xfe" as not printable ASCII.
    Any byte outside printable ASCII now gets the one answer, and nothing is started."""
    job = create_job(services.workspace, "alice")
    keys = ["ключ".encode(), b"\xff\xfe", b"click\x8e42", b"click\xa042", b"click\t42", b"a b"]
    settings = gateway_settings(services.target)
    with LiveGateway(create_app(settings, Backends.from_settings(settings))) as gateway:
        sent = {name.encode(): value.encode() for name, value in bearer("alice").items()}
        sent[b"Origin"] = gateway.url.encode()
        for key in keys:
            response = httpx.post(
                f"{gateway.url}/api/jobs/{job}/strategy-snapshot",
                headers={**sent, b"Idempotency-Key": key},
            )
            problem = response.json()
            found = (response.status_code, problem["code"], problem.get("field"))
            assert (*found, problem["detail"]) == NOT_A_KEY, (key, problem)
    assert _stored_rows(services)[2] == 0  # no operation was started


def test_a_header_or_a_member_sent_twice_is_refused_not_guessed(services: Services) -> None:
    """A proxy in front may read the other one of two: an idempotency key sent twice was
    read as its first (the second alone then made another analysis), a member named twice
    in a body as its last."""
    job = create_job(services.workspace, "alice")
    twice: list[tuple[str, str, list[tuple[str, str]], bytes | None, str]] = [
        (
            "POST",
            f"/api/jobs/{job}/strategy-snapshot",
            [("Idempotency-Key", "a"), ("Idempotency-Key", "b")],
            None,
            "Idempotency-Key",
        ),
        (
            "GET",
            "/api/events",
            [("Last-Event-ID", "0-0"), ("Last-Event-ID", "0-1")],
            None,
            "Last-Event-ID",
        ),
        (
            "POST",
            "/api/jobs",
            [("Content-Type", "application/json")],
            b'{"title": "A", "title": "B", "description": "x"}',
            "title",
        ),
        (
            "PUT",
            "/api/settings/ai",
            [("Content-Type", "application/json")],
            b'{"privacy": "local_only", "privacy": "external_allowed"}',
            "privacy",
        ),
    ]

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            for method, path, headers, content, name in twice:
                response = await client.request(
                    method, path, headers=[*bearer("alice").items(), *headers], content=content
                )
                problem = response.json()
                assert (response.status_code, problem["code"]) == (400, "invalid_argument"), path
                assert problem["field"] == name, problem
                assert problem["detail"].endswith("must be sent once."), problem
            jobs = await client.get("/api/jobs", headers=bearer("alice"))
            assert [item["id"] for item in jobs.json()["items"]] == [job]
            settings = await client.get("/api/settings/ai", headers=bearer("alice"))
            assert settings.json()["privacy"] == "local_only"

    run(scenario())


def test_a_json_body_is_read_only_as_json_and_an_empty_one_only_where_optional(
    services: Services,
) -> None:
    """A body is read as JSON when it says so (any case, with parameters) or names no type
    at all; any other type is a 415, however JSON-like the bytes. An empty body stands for
    ``{}`` only where every member is optional (an analysis's start): a write that takes a
    body, the settings' PUT among them, refuses it rather than changing nothing."""
    entitle(services.db, "alice")
    job = create_job(services.workspace, "alice")
    body = json.dumps({"title": "Engineer", "description": JOB_TEXT}).encode()
    read_as_json = [{}, {"Content-Type": "APPLICATION/JSON; charset=utf-8"}]
    refused = ["text/plain", "application/x-www-form-urlencoded", "application/jsonx"]

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            for headers in read_as_json:
                created = await client.post(
                    "/api/jobs", content=body, headers={**bearer("alice"), **headers}
                )
                assert created.status_code == 201, (headers, created.text)
            for media_type in refused:
                response = await client.post(
                    "/api/jobs",
                    content=body,
                    headers={**bearer("alice"), "Content-Type": media_type},
                )
                assert response.status_code == 415, (media_type, response.text)
                assert response.json()["code"] == "unsupported_media_type"
            for method, path in (("POST", "/api/jobs"), ("PUT", "/api/settings/ai")):
                response = await client.request(
                    method, path, content=b"", headers={**bearer("alice"), **JSON}
                )
                assert response.status_code == 400, (path, response.text)
                assert response.json()["code"] == "malformed_json"
            started = await client.post(
                f"/api/jobs/{job}/strategy-snapshot",
                content=b"",
                headers={**bearer("alice"), **JSON},
            )
            assert started.status_code == 202, started.text
            jobs = await client.get("/api/jobs", headers=bearer("alice"))
            assert len(jobs.json()["items"]) == 1 + len(read_as_json)

    run(scenario())


def test_json_nested_past_the_parsers_depth_is_malformed_not_a_fault(services: Services) -> None:
    """Deep nesting fits in a small body: Python's parser gives up on it with a
    RecursionError, which is the client's malformed JSON, not a 500."""
    depth = 30_000

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            for method, path, opened in (
                ("POST", "/api/jobs", b"["),
                ("POST", "/api/jobs", b'{"a":'),
                ("PUT", "/api/settings/ai", b"["),
            ):
                response = await client.request(
                    method, path, content=opened * depth, headers={**bearer("alice"), **JSON}
                )
                assert response.status_code == 400, (path, opened, response.text)
                assert response.json()["code"] == "malformed_json"

    run(scenario())


def test_a_json_body_that_is_not_an_object_is_refused_by_every_write_that_reads_one(
    services: Services,
) -> None:
    """An array naming the members, or none: never read as an object, nor as no change."""
    job = create_job(services.workspace, "alice")
    writes = [
        ("POST", "/api/jobs"),
        ("POST", "/api/attachments"),
        ("PUT", "/api/settings/ai"),
        ("POST", f"/api/jobs/{job}/strategy-snapshot"),
        ("POST", "/auth/login"),
    ]

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            for method, path in writes:
                for content in (b"[]", b'["title", "description", "token"]', b"7", b'"x"'):
                    response = await client.request(
                        method, path, content=content, headers={**bearer("alice"), **JSON}
                    )
                    found = (response.status_code, response.json()["code"])
                    assert found == (400, "invalid_body"), (path, content, response.text)
            jobs = await client.get("/api/jobs", headers=bearer("alice"))
            assert [item["id"] for item in jobs.json()["items"]] == [job]

    run(scenario())
