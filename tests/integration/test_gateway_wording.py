"""What the gateway says when it refuses: full sentences, one wording per fault, on both engines.

The page shows a problem's ``detail`` as it is, so each one is a sentence: a
capital letter (or the name of the field it is about, as spelt) and a closing
full stop, whichever layer wrote it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest

from durable_ops.api.workspace.v1 import workspace_pb2 as workspace_pb
from durable_ops.model.admission import Limits
from durable_ops.model.bounds import PAGE_SIZE_RULE
from durable_ops.model.scope import Role
from tests.support.clock import ManualClock
from tests.support.gateway import bearer, create_operation, gateway_client, make_app, run
from tests.support.grpc_services import Services, metadata, running_services
from tests.support.workspace_client import create_job, entitle

PAGE_SIZE_DETAIL = f"page_size {PAGE_SIZE_RULE}."
LIST_ROUTES = ["/api/operations", "/api/jobs", "/api/attachments", "/api/notifications"]
# Not digits, out of range, too many digits, signed, decimal, spaced, full-width digit.
BAD_PAGE_SIZES = [
    "0",
    "101",
    "1000",
    "99999999999999999999",
    "-1",
    "5.0",
    "%205",
    "abc",
    "%EF%BC%95",
]


def reads_as_a_sentence(problem: dict[str, Any]) -> bool:
    """A capital first letter, or the problem's field name first; a closing full stop."""
    detail = problem.get("detail")
    if not isinstance(detail, str) or not detail.endswith((".", "?", "!")):
        return False
    field = problem.get("field")
    if isinstance(field, str) and detail.startswith(field + " "):
        return True
    return detail[:1].isupper()


@pytest.fixture
def services(db_url: str) -> Iterator[Services]:
    with running_services(db_url, ManualClock(), Limits(per_user=2, global_=3)) as running:
        yield running


async def _job(client: httpx.AsyncClient, user: str) -> str:
    job = {"title": "Engineer", "company": "Acme", "description": "Python, gRPC, MariaDB."}
    created = await client.post("/api/jobs", json=job, headers=bearer(user))
    assert created.status_code == 201, created.text
    return str(created.json()["id"])


def _start(client: httpx.AsyncClient, job: str, user: str) -> Any:
    return client.post(f"/api/jobs/{job}/strategy-snapshot", headers=bearer(user))


def test_both_over_capacity_answers_are_full_sentences(services: Services) -> None:
    for user in ("alice", "bob"):
        entitle(services.db, user)

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            alices = [await _job(client, "alice") for _ in range(3)]
            bobs = [await _job(client, "bob") for _ in range(2)]
            for job in alices[:2]:
                assert (await _start(client, job, "alice")).status_code == 202
            per_user = await _start(client, alices[2], "alice")
            assert per_user.status_code == 429
            assert per_user.json()["detail"] == (
                "At most 2 AI analyses may be queued or running at once per user."
            )
            assert (await _start(client, bobs[0], "bob")).status_code == 202  # 3 of 3 in use
            everyone = await _start(client, bobs[1], "bob")
            assert everyone.status_code == 429
            assert everyone.json()["code"] == "capacity_exceeded"
            assert everyone.json()["detail"] == "AI capacity is fully used right now."
            assert int(everyone.headers["retry-after"]) > 0

    run(scenario())


def test_every_refusal_of_an_analysis_is_a_full_sentence(services: Services) -> None:
    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            job = await _job(client, "alice")
            answers = [await _start(client, job, "alice")]  # Free: not entitled
            entitle(services.db, "alice", ai_enabled=False)
            answers.append(await _start(client, job, "alice"))  # AI off in the settings
            entitle(services.db, "alice")
            answers.append(await _start(client, "0" * 32, "alice"))  # no such job
            answers.append(await _start(client, "not an id", "alice"))  # could never exist
            for path in ("/api/operations/" + "0" * 32, "/api/nothing", "/api/jobs/x/y"):
                answers.append(await client.get(path, headers=bearer("alice")))
            answers.append(await client.delete("/api/jobs", headers=bearer("alice")))
            answers.append(await client.get("/api/jobs"))  # not signed in
            codes = [answer.json()["code"] for answer in answers]
            assert codes == [
                "not_entitled",
                "ai_disabled",
                "job_not_found",
                "job_not_found",
                "operation_not_found",
                "not_found",
                "not_found",
                "method_not_allowed",
                "unauthenticated",
            ]
            for answer in answers:
                assert reads_as_a_sentence(answer.json()), answer.json()

    run(scenario())


def test_the_page_size_errors_are_worded_the_same_everywhere(services: Services) -> None:
    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            for route in LIST_ROUTES:
                for raw in BAD_PAGE_SIZES:
                    answer = await client.get(f"{route}?page_size={raw}", headers=bearer("alice"))
                    problem = answer.json()
                    assert answer.status_code == 400, (route, raw, problem)
                    assert (problem["code"], problem["field"]) == ("invalid_argument", "page_size")
                    assert problem["detail"] == PAGE_SIZE_DETAIL, (route, raw)

    run(scenario())
    # The services say the same to a gRPC caller: one rule, one wording.
    with pytest.raises(grpc.RpcError) as caught:
        services.workspace.ListJobs(
            workspace_pb.ListRequest(page_size=101), metadata=metadata(Role.GATEWAY, "alice")
        )
    trailers = {item.key: str(item.value) for item in caught.value.trailing_metadata() or ()}
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (trailers["x-error-field"], trailers["x-error-reason"]) == ("page_size", PAGE_SIZE_RULE)


def test_a_reused_idempotency_key_says_it_was_used_for_a_different_request(
    services: Services,
) -> None:
    entitle(services.db, "alice")
    # The storage check: the same key with another body, straight to the Operations service.
    create_operation(services, "alice", key="click-7", subject=("job", "job-1"))
    with pytest.raises(grpc.RpcError) as caught:
        create_operation(services, "alice", key="click-7", subject=("job", "job-2"))
    assert caught.value.code() == grpc.StatusCode.ALREADY_EXISTS
    assert caught.value.details() == "This key was used for a different request."

    # The admission check, through the gateway: the same key for another job.
    first, second = create_job(services.workspace, "alice"), create_job(services.workspace, "alice")

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            keyed = {**bearer("alice"), "Idempotency-Key": "click-8"}
            path = "/api/jobs/{}/strategy-snapshot"
            assert (await client.post(path.format(first), headers=keyed)).status_code == 202
            reused = await client.post(path.format(second), headers=keyed)
            assert reused.status_code == 409
            assert reused.json()["code"] == "idempotency_conflict"
            assert reused.json()["detail"] == "This key was used for a different request."

    run(scenario())
