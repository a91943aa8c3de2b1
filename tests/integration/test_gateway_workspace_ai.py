"""Jobs, attachments, AI settings and the AI analysis routes over HTTP, on both engines."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import httpx
import pytest
from sqlalchemy import func, select
from starlette.routing import Route

from durable_ops.gateway import backends
from durable_ops.model.admission import Limits
from durable_ops.model.budgets import PRO_DAILY_TOKENS
from durable_ops.rpc.client import CHANNEL_OPTIONS
from durable_ops.storage import capacity
from durable_ops.storage.schema import UserOperation
from tests.integration.test_gateway_isolation import ID_ROUTES as OPERATION_ID_ROUTES
from tests.integration.test_gateway_wording import reads_as_a_sentence
from tests.support.clock import ManualClock
from tests.support.gateway import bearer, claim, complete, gateway_client, make_app, publish, run
from tests.support.grpc_services import Services, running_services
from tests.support.stored import scalar
from tests.support.workspace_client import CV_TEXT, JOB_TEXT, entitle

MISSING_ID = "0" * 32
JOB = {"title": "Engineer", "company": "Acme", "description": JOB_TEXT}
CV = {"kind": "cv", "filename": "cv.txt", "text": CV_TEXT}


@pytest.fixture
def services(db_url: str, clock: ManualClock) -> Iterator[Services]:
    with running_services(db_url, clock, Limits(per_user=2, global_=3)) as running:
        yield running


def _operation_count(services: Services) -> int:
    return int(scalar(services.db, select(func.count()).select_from(UserOperation)) or 0)


async def _job(client: httpx.AsyncClient, user: str = "alice") -> str:
    created = await client.post("/api/jobs", json=JOB, headers=bearer(user))
    assert created.status_code == 201
    return str(created.json()["id"])


async def _cv(client: httpx.AsyncClient, user: str = "alice") -> str:
    created = await client.post("/api/attachments", json=CV, headers=bearer(user))
    assert created.status_code == 201
    return str(created.json()["id"])


def _problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert body["code"] == code, body
    assert reads_as_a_sentence(body), body
    return body


def test_jobs_and_attachments_round_trip(services: Services) -> None:
    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            created = await client.post("/api/jobs", json=JOB, headers=bearer("alice"))
            assert created.status_code == 201
            job = created.json()
            assert created.headers["location"] == f"/api/jobs/{job['id']}"
            assert {key: job[key] for key in JOB} == JOB
            fetched = await client.get(f"/api/jobs/{job['id']}", headers=bearer("alice"))
            assert fetched.json() == job
            listed = await client.get("/api/jobs", headers=bearer("alice"))
            assert [item["id"] for item in listed.json()["items"]] == [job["id"]]

            cv = await client.post("/api/attachments", json=CV, headers=bearer("alice"))
            assert cv.status_code == 201
            assert "text" not in cv.json()
            assert cv.json()["text_length"] == len(CV_TEXT)
            one = await client.get(f"/api/attachments/{cv.json()['id']}", headers=bearer("alice"))
            assert one.json()["text"] == CV_TEXT
            many = await client.get("/api/attachments", headers=bearer("alice"))
            assert "text" not in many.json()["items"][0]

    run(scenario())


def test_a_page_of_cvs_unchanged_since_it_was_read_is_a_304(services: Services) -> None:
    """Each page of the CV list carries an ETag of itself; asked for again naming it, an
    unchanged page is a 304 with no body (the web UI reads every CV whenever its tab is shown
    again), and a CV added or deleted since is the whole page again, under a new tag."""

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            alice = bearer("alice")
            for _ in range(3):
                await _cv(client)

            async def page(path: str, if_none_match: str | None = None) -> httpx.Response:
                asked = {"If-None-Match": if_none_match} if if_none_match is not None else {}
                return await client.get(path, headers={**alice, **asked})

            first = await page("/api/attachments?page_size=2")
            assert first.status_code == 200
            tag = first.headers["etag"]
            assert re.fullmatch(r'"[0-9a-f]{32}"', tag), tag
            assert first.headers["cache-control"] == "no-store"  # the reader keeps it, not a cache
            assert (await page("/api/attachments?page_size=2")).headers["etag"] == tag  # stable

            for named in (tag, f"W/{tag}", f'"other", {tag}', "*"):
                same = await page("/api/attachments?page_size=2", named)
                assert same.status_code == 304, named
                assert same.content == b""
                assert same.headers["etag"] == tag
                assert same.headers["cache-control"] == "no-store"
                assert "content-type" not in same.headers
            other = await page("/api/attachments?page_size=2", '"0123456789abcdef"')
            assert other.status_code == 200
            assert other.json() == first.json()

            token = first.json()["next_page_token"]
            second = await page(f"/api/attachments?page_size=2&page_token={token}")
            assert second.status_code == 200
            assert len(second.json()["items"]) == 1
            assert second.headers["etag"] != tag  # each page its own
            assert (
                await page("/api/attachments?page_size=2", second.headers["etag"])
            ).status_code == 200

            # Another user's list is not alice's, even empty against empty.
            theirs = await client.get(
                "/api/attachments", headers={**bearer("bob"), "If-None-Match": tag}
            )
            assert theirs.status_code == 200
            assert theirs.json()["items"] == []

            # The whole list, then one CV more, then one fewer: each time a new page.
            whole = await page("/api/attachments")
            assert (await page("/api/attachments", whole.headers["etag"])).status_code == 304
            added = await _cv(client)
            changed = await page("/api/attachments", whole.headers["etag"])
            assert changed.status_code == 200
            assert added in [item["id"] for item in changed.json()["items"]]
            assert changed.headers["etag"] != whole.headers["etag"]
            gone = await client.delete(f"/api/attachments/{added}", headers=alice)
            assert gone.status_code == 204
            after = await page("/api/attachments", changed.headers["etag"])
            assert after.status_code == 200
            assert after.json() == whole.json()
            assert after.headers["etag"] == whole.headers["etag"]  # the same page, the same tag

            # The jobs list likewise (a job's description is up to 20,000 characters).
            await _job(client)
            jobs = await page("/api/jobs")
            assert (await page("/api/jobs", jobs.headers["etag"])).status_code == 304
            await _job(client)
            assert (await page("/api/jobs", jobs.headers["etag"])).status_code == 200

    run(scenario())


def test_workspace_bad_input_is_a_4xx_problem(services: Services) -> None:
    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            alice = bearer("alice")
            long_description = {**JOB, "description": "x" * 20_001}
            cases = [
                (
                    await client.post("/api/jobs", json=long_description, headers=alice),
                    "invalid_argument",
                ),
                (
                    await client.post("/api/jobs", json={**JOB, "title": ""}, headers=alice),
                    "invalid_argument",
                ),
                (
                    await client.post("/api/jobs", json={**JOB, "salary": 1}, headers=alice),
                    "unknown_field",
                ),
                (
                    await client.post("/api/jobs", json={**JOB, "title": 7}, headers=alice),
                    "invalid_argument",
                ),
                (
                    await client.post(
                        "/api/attachments", json={**CV, "kind": "pdf"}, headers=alice
                    ),
                    "invalid_argument",
                ),
                (
                    await client.post(
                        "/api/attachments", json={**CV, "text": "x" * 200_001}, headers=alice
                    ),
                    "invalid_argument",
                ),
                (
                    await client.put("/api/settings/ai", json={"plan": "pro"}, headers=alice),
                    "invalid_argument",
                ),
                (
                    await client.put(
                        "/api/settings/ai", json={"privacy": "everywhere"}, headers=alice
                    ),
                    "invalid_argument",
                ),
                (
                    await client.put("/api/settings/ai", json={"ai_enabled": "yes"}, headers=alice),
                    "invalid_argument",
                ),
                (await client.get("/api/jobs/not%20an%20id", headers=alice), "job_not_found"),
                (
                    await client.get(f"/api/attachments/{MISSING_ID}", headers=alice),
                    "attachment_not_found",
                ),
            ]
            for response, code in cases:
                assert 400 <= response.status_code < 500, response.text
                assert response.json()["code"] == code
            # Refused whole, never cut, in the number format the web UI uses.
            assert cases[0][0].json()["detail"] == "description must be at most 20,000 characters."
            assert cases[5][0].json()["detail"] == "text must be at most 200,000 characters."
            too_big = await client.post(
                "/api/jobs", content=b'{"title": "' + b"x" * 300_000 + b'"}', headers=alice
            )
            _problem(too_big, 413, "payload_too_large")
            assert too_big.json()["detail"] == "The body must be at most 262,144 bytes."
            # A CV's body may be 2 MiB: the longest text, each character escaped, fits; a
            # body past it is never read whole (its text would be refused only after).
            longest = json.dumps({**CV, "text": "\u00e9" * 200_000}).encode()  # 6 bytes each
            assert len(longest) > 1_200_000
            created = await client.post("/api/attachments", content=longest, headers=alice)
            assert created.status_code == 201, created.text
            past = b'{"kind": "cv", "filename": "cv.txt", "text": "' + b"x" * 2 * 1024 * 1024
            too_big = await client.post("/api/attachments", content=past + b'"}', headers=alice)
            _problem(too_big, 413, "payload_too_large")
            assert too_big.json()["detail"] == "The body must be at most 2,097,152 bytes."

    run(scenario())


def test_ai_settings_plan_is_read_only_and_privacy_changes(services: Services) -> None:
    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            alice = bearer("alice")
            default = (await client.get("/api/settings/ai", headers=alice)).json()
            budget = default.pop("budget")
            assert default == {"ai_enabled": False, "privacy": "local_only", "plan": "free"}
            # Free's budget is nothing (ADR 0041); Pro's is its plan's default.
            assert (budget["limit"], budget["spent"], budget["reserved"]) == (0, 0, 0)
            changed = await client.put(
                "/api/settings/ai", json={"privacy": "external_allowed"}, headers=alice
            )
            assert changed.json() == {
                "ai_enabled": False,
                "privacy": "external_allowed",
                "plan": "free",
                "budget": budget,
            }
            entitle(services.db, "alice", plan="pro", ai_enabled=False)  # `opsctl users set-plan`
            assert (await client.get("/api/settings/ai", headers=alice)).json()["plan"] == "pro"
            switched_on = await client.put(
                "/api/settings/ai", json={"ai_enabled": True}, headers=alice
            )
            assert switched_on.json() == {
                "ai_enabled": True,
                "privacy": "external_allowed",
                "plan": "pro",
                "budget": {**budget, "limit": PRO_DAILY_TOKENS},
            }

    run(scenario())


def test_a_free_user_cannot_switch_ai_on(services: Services) -> None:
    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            alice = bearer("alice")
            for body in ({"ai_enabled": True}, {"ai_enabled": True, "privacy": "local_only"}):
                refused = await client.put("/api/settings/ai", json=body, headers=alice)
                problem = _problem(refused, 403, "plan_required")
                assert problem["detail"] == (
                    "AI analyses need the Pro plan, and this account is on the Free plan; "
                    "an operator grants Pro with `opsctl users set-plan alice pro`."
                )
                assert "field" not in problem
            after = (await client.get("/api/settings/ai", headers=alice)).json()
            after.pop("budget")
            assert after == {"ai_enabled": False, "privacy": "local_only", "plan": "free"}
            switched_off = await client.put(
                "/api/settings/ai", json={"ai_enabled": False}, headers=alice
            )
            assert switched_off.status_code == 200
            # Another user's plan is theirs: bob on Pro does not let alice switch on.
            entitle(services.db, "bob")
            again = await client.put("/api/settings/ai", json={"ai_enabled": True}, headers=alice)
            _problem(again, 403, "plan_required")

    run(scenario())


def test_strategy_snapshot_is_admitted_with_202_and_location(services: Services) -> None:
    entitle(services.db, "alice")

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            job, cv = await _job(client), await _cv(client)
            path = f"/api/jobs/{job}/strategy-snapshot"
            started = await client.post(path, json={"attachment_id": cv}, headers=bearer("alice"))
            assert started.status_code == 202
            body = started.json()
            assert body["status_url"] == f"/api/operations/{body['operation_id']}"
            assert started.headers["location"] == body["status_url"]
            assert started.headers["retry-after"] == "1"
            status = await client.get(body["status_url"], headers=bearer("alice"))
            assert status.json()["subject"] == {"type": "job", "id": job}
            empty_body = await client.post(path, headers=bearer("alice"))
            assert empty_body.status_code == 202
            assert empty_body.json()["operation_id"] == body["operation_id"]  # active: reused
            cached = (await client.get(path, headers=bearer("alice"))).json()
            assert cached["snapshot"] is None
            assert cached["operation"]["id"] == body["operation_id"]

    run(scenario())


class _FinishAfterFirstRead(grpc.aio.UnaryUnaryClientInterceptor):
    """Runs ``finish`` once, right after the first of the GET's two reads (the note, the
    operation) has answered: the worker publishing and completing between them."""

    def __init__(self, finish: Callable[[], None]) -> None:
        self._finish: Callable[[], None] | None = finish

    async def intercept_unary_unary(
        self, continuation: Callable[..., Any], details: Any, request: Any
    ) -> Any:
        call = await continuation(details, request)
        if self._finish is not None and details.method.endswith((b"/GetNote", b"/Lookup")):
            finish, self._finish = self._finish, None
            with contextlib.suppress(grpc.aio.AioRpcError):  # no note yet: a NOT_FOUND
                await call
            await asyncio.to_thread(finish)
        return call


def test_a_finished_analysis_is_never_read_without_its_result(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The GET reads two services, and the worker may publish its note and complete
    between the two reads: whichever it reads first, a succeeded analysis comes with its
    result (else the page shows a finished analysis with nothing in it, and stops looking)."""
    entitle(services.db, "alice")
    result = {"fit_score": 82, "summary": "Strong.", "strengths": [], "gaps": [], "next_steps": []}

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            path = f"/api/jobs/{await _job(client)}/strategy-snapshot"
            started = await client.post(path, headers=bearer("alice"))
            assert started.status_code == 202
        claimed = await asyncio.to_thread(claim, services, ["strategy.snapshot"])

        def finish() -> None:
            publish(services, claimed, result)
            complete(services, claimed)

        interceptor = _FinishAfterFirstRead(finish)
        monkeypatch.setattr(
            backends,
            "open_channel",
            lambda target, _ca: grpc.aio.insecure_channel(
                target, options=CHANNEL_OPTIONS, interceptors=[interceptor]
            ),
        )
        async with gateway_client(make_app(services.target)) as client:
            first = (await client.get(path, headers=bearer("alice"))).json()
            assert first["operation"]["state"] in {"running", "succeeded"}
            if first["operation"]["state"] == "succeeded":
                assert first["snapshot"] is not None, first
            again = (await client.get(path, headers=bearer("alice"))).json()
        assert again["operation"]["state"] == "succeeded"
        assert again["snapshot"]["result"] == result

    run(scenario())


def test_cv_review_takes_an_optional_job(services: Services) -> None:
    entitle(services.db, "alice")

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            job, cv = await _job(client), await _cv(client)
            path = f"/api/attachments/{cv}/cv-review"
            started = await client.post(path, json={"job_id": job}, headers=bearer("alice"))
            assert started.status_code == 202
            cached = (await client.get(path, headers=bearer("alice"))).json()
            assert cached["operation"]["task_type"] == "cv.review"
            assert cached["operation"]["subject"] == {"type": "attachment", "id": cv}

    run(scenario())


def test_two_identical_posts_at_once_yield_one_operation(services: Services) -> None:
    entitle(services.db, "alice")

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            job = await _job(client)
            path = f"/api/jobs/{job}/strategy-snapshot"
            first, second = await asyncio.gather(
                client.post(path, headers=bearer("alice")),
                client.post(path, headers=bearer("alice")),
            )
            assert (first.status_code, second.status_code) == (202, 202)
            assert first.json()["operation_id"] == second.json()["operation_id"]

    run(scenario())
    assert _operation_count(services) == 1


def test_idempotency_key_header_is_honoured_and_bounded(services: Services) -> None:
    entitle(services.db, "alice")

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            job, other = await _job(client), await _job(client)
            keyed = {**bearer("alice"), "Idempotency-Key": "click-42"}
            first = await client.post(f"/api/jobs/{job}/strategy-snapshot", headers=keyed)
            again = await client.post(f"/api/jobs/{job}/strategy-snapshot", headers=keyed)
            assert first.json()["operation_id"] == again.json()["operation_id"]
            reused = await client.post(f"/api/jobs/{other}/strategy-snapshot", headers=keyed)
            conflict = _problem(reused, 409, "idempotency_conflict")
            assert conflict["detail"] == "This key was used for a different request."
            for refused in ("k" * 129, ""):  # an empty key is not read as none
                headers = {**bearer("alice"), "Idempotency-Key": refused}
                bad = await client.post(f"/api/jobs/{job}/strategy-snapshot", headers=headers)
                assert _problem(bad, 400, "invalid_argument")["field"] == "Idempotency-Key"

    run(scenario())


def test_refusals_map_to_403_429_503_and_404(services: Services) -> None:
    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            jobs = [await _job(client) for _ in range(3)]
            bobs = await _job(client, "bob")

            def start(job: str, user: str = "alice") -> Any:
                return client.post(f"/api/jobs/{job}/strategy-snapshot", headers=bearer(user))

            _problem(await start(jobs[0]), 403, "not_entitled")
            entitle(services.db, "alice", ai_enabled=False)
            _problem(await start(jobs[0]), 403, "ai_disabled")
            entitle(services.db, "alice")
            assert (await start(jobs[0])).status_code == 202
            assert (await start(jobs[1])).status_code == 202
            over = await start(jobs[2])
            _problem(over, 429, "capacity_exceeded")
            assert int(over.headers["retry-after"]) > 0
            theirs = await start(bobs)  # alice asks for bob's job
            missing = await start(MISSING_ID)
            assert _problem(theirs, 404, "job_not_found") == _problem(missing, 404, "job_not_found")
            services.db.run(
                lambda tx: capacity.set_ai_enabled(tx, False, services.clock()), owner_id=None
            )
            _problem(await start(jobs[2]), 503, "ai_unavailable")

    run(scenario())


def test_get_is_cache_only_and_never_creates_work(services: Services) -> None:
    entitle(services.db, "alice")

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            job, cv = await _job(client), await _cv(client)
            for path in (f"/api/jobs/{job}/strategy-snapshot", f"/api/attachments/{cv}/cv-review"):
                for _ in range(3):
                    cached = await client.get(path, headers=bearer("alice"))
                    assert cached.json() == {"snapshot": None, "operation": None, "draft": None}
            theirs = await client.get(f"/api/jobs/{job}/strategy-snapshot", headers=bearer("bob"))
            _problem(theirs, 404, "job_not_found")

    run(scenario())
    assert _operation_count(services) == 0  # no operation, so no worker and no model is reached


WORKSPACE_ID_ROUTES = [
    ("GET", "/api/jobs/{id}", "job"),
    ("DELETE", "/api/jobs/{id}", "job"),
    ("GET", "/api/attachments/{id}", "cv"),
    ("DELETE", "/api/attachments/{id}", "cv"),
    ("GET", "/api/jobs/{id}/strategy-snapshot", "job"),
    ("POST", "/api/jobs/{id}/strategy-snapshot", "job"),
    ("GET", "/api/attachments/{id}/cv-review", "cv"),
    ("POST", "/api/attachments/{id}/cv-review", "cv"),
    ("GET", "/api/operations/{id}/result", "result"),
]


def test_every_workspace_id_route_hides_other_owners(services: Services) -> None:
    entitle(services.db, "bob")
    entitle(services.db, "alice")

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            ids = {"job": await _job(client), "cv": await _cv(client)}
            started = await client.post(
                f"/api/jobs/{ids['job']}/strategy-snapshot", headers=bearer("alice")
            )
            claimed = await asyncio.to_thread(claim, services, ["strategy.snapshot"])
            await asyncio.to_thread(publish, services, claimed, {"fit_score": 1})
            await asyncio.to_thread(complete, services, claimed)
            ids["result"] = started.json()["operation_id"]
            mine = await client.get(
                f"/api/operations/{ids['result']}/result", headers=bearer("alice")
            )
            assert mine.status_code == 200, mine.text
            for method, template, which in WORKSPACE_ID_ROUTES:
                theirs = await client.request(
                    method, template.format(id=ids[which]), headers=bearer("bob")
                )
                missing = await client.request(
                    method, template.format(id=MISSING_ID), headers=bearer("bob")
                )
                assert theirs.status_code == 404, (method, template, theirs.text)
                assert theirs.json() == missing.json(), (method, template)
                # An id no service could have issued is refused before any service is
                # asked, in the same words (ids.py): "not found" of what the route names.
                for malformed in ("not%20an%20id", "x" * 65):
                    refused = await client.request(
                        method, template.format(id=malformed), headers=bearer("bob")
                    )
                    assert refused.json() == missing.json(), (method, template, malformed)

    run(scenario())


def test_isolation_lists_cover_every_id_route() -> None:
    app = make_app("127.0.0.1:1")
    routes = {
        (method, route.path)
        for route in app.routes
        if isinstance(route, Route)
        and "{id}" in route.path
        # The operator console reads across owners by design, and no owner reaches it
        # (tests/integration/test_console.py).
        and not route.path.startswith("/console/")
        for method in (route.methods or set()) - {"HEAD"}
    }
    covered = {(method, path) for method, path, _ in [*OPERATION_ID_ROUTES, *WORKSPACE_ID_ROUTES]}
    assert routes == covered


def test_each_finished_analysis_is_its_own_result(services: Services, clock: ManualClock) -> None:
    """A re-run adds a result instead of overwriting it: the GET answers the newest, naming
    its CV and model; a past operation's result reads by its id; an id naming none of the
    caller's results is a 404 ``result_not_found``."""
    entitle(services.db, "alice")

    async def finish(score: int, model: str) -> None:
        clock.advance(1)  # each run later than the last, as on any real clock
        claimed = await asyncio.to_thread(claim, services, ["strategy.snapshot"])
        await asyncio.to_thread(
            publish, services, claimed, {"fit_score": score}, provenance=("h", model, "local")
        )
        await asyncio.to_thread(complete, services, claimed)

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            alice = bearer("alice")
            job, cv = await _job(client), await _cv(client)
            path = f"/api/jobs/{job}/strategy-snapshot"
            first = (await client.post(path, json={"attachment_id": cv}, headers=alice)).json()
            await finish(21, "qwen2.5-3b")
            second = (await client.post(path, headers=alice)).json()
            await finish(64, "dev-heuristic")

            newest = (await client.get(path, headers=alice)).json()["snapshot"]
            assert newest["result"] == {"fit_score": 64}
            assert newest["operation_id"] == second["operation_id"]
            assert newest["context"] is None  # this run had no CV
            assert newest["provenance"] == {"model": "dev-heuristic", "route": "local"}

            earlier = await client.get(
                f"/api/operations/{first['operation_id']}/result", headers=alice
            )
            assert earlier.status_code == 200, earlier.text
            body = earlier.json()
            assert body["result"] == {"fit_score": 21}
            assert body["context"] == {"type": "attachment", "id": cv, "name": "cv.txt"}
            assert body["provenance"] == {"model": "qwen2.5-3b", "route": "local"}
            assert (body["task_type"], body["subject"]) == (
                "strategy.snapshot",
                {"type": "job", "id": job},
            )
            assert body["created_at"] < newest["created_at"]

            for bad in (MISSING_ID, "x" * 65, "not%20an%20id", "a.b"):
                missing = await client.get(f"/api/operations/{bad}/result", headers=alice)
                _problem(missing, 404, "result_not_found")

    run(scenario())
