"""Deleting a job or a CV (ADR 60) over HTTP and in storage, on SQLite and MariaDB: what goes
with it, what stays, its quota share given back, the refusal while an analysis uses it,
and a delete racing an admission of an analysis of the same row, or an operator's retry of
one (ADR 65)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from functools import partial
from typing import Any, TypeVar

import grpc
import httpx
import pytest
from sqlalchemy import func, select, update
from structlog.testing import capture_logs

from durable_ops.ai_admission.admit import AdmitRequest, admit
from durable_ops.api.operator.v1 import operator_pb2 as opb
from durable_ops.api.workspace.v1 import workspace_pb2 as wpb
from durable_ops.model import bounds
from durable_ops.model.admission import Limits
from durable_ops.model.errors import InUse, InvalidTransition, NotFound
from durable_ops.model.scope import Role
from durable_ops.operations.app import SUBJECT_GONE, operator_retry
from durable_ops.storage import operations, quota, workspace
from durable_ops.storage.db import Database
from durable_ops.storage.drafts import DRAFTS
from durable_ops.storage.operations.rows import OPS
from durable_ops.storage.quota import STORAGE, STORAGE_QUOTA_EXCEEDED
from durable_ops.storage.schema import AiWorkspaceNote, UserOperation
from durable_ops.storage.tx import OperatorTx, Tx
from tests.integration.test_gateway_workspace_ai import CV, JOB, _problem
from tests.support.clock import ManualClock
from tests.support.gateway import (
    Claimed,
    acknowledge_cancel,
    bearer,
    claim,
    complete,
    gateway_client,
    make_app,
    publish,
    run,
)
from tests.support.grpc_services import Services, metadata, running_services
from tests.support.operations_client import QUEUED, OpsClient, expect_failure
from tests.support.stored import scalar
from tests.support.workspace_client import create_cv, create_job, entitle, snapshot_request

JOB_BYTES = quota.utf8_bytes(JOB["title"], JOB["company"], JOB["description"])
CV_BYTES = quota.utf8_bytes(CV["filename"], CV["text"])
SNAPSHOT = "strategy.snapshot"
REVIEW = "cv.review"
T = TypeVar("T")


@pytest.fixture
def services(db_url: str, clock: ManualClock) -> Iterator[Services]:
    with running_services(db_url, clock, Limits(per_user=4, global_=8)) as running:
        yield running


def _held(db: Database, owner: str) -> tuple[int, int, int]:
    query = select(STORAGE.c.jobs, STORAGE.c.attachments, STORAGE.c.stored_bytes).where(
        STORAGE.c.owner_user_id == owner
    )
    row = db.run(lambda tx: tx.across_owners().execute(query).one(), owner_id=None)
    return (row.jobs, row.attachments, row.stored_bytes)


def _set_held(db: Database, owner: str, **counts: int) -> None:
    with db.engine.begin() as connection:
        connection.execute(update(STORAGE).where(STORAGE.c.owner_user_id == owner).values(**counts))


def _results(db: Database) -> int:
    return int(scalar(db, select(func.count()).select_from(AiWorkspaceNote)) or 0)


def _deleted_lines(logs: Sequence[Mapping[str, Any]], event: str) -> list[dict[str, Any]]:
    """What the service logged of each delete: the counts of what went with the row, and
    never a word of its text (the row's id and the owner besides)."""
    lines = [line for line in logs if line["event"] == event]
    for line in lines:
        assert set(line) == {
            "event",
            "log_level",
            "owner",
            "job_id" if event == "job_deleted" else "attachment_id",
            "results",
            "drafts",
            "stored_bytes",
        }, line
    return [{key: line[key] for key in ("results", "drafts", "stored_bytes")} for line in lines]


async def _create(client: httpx.AsyncClient, path: str, body: dict[str, str], user: str) -> str:
    created = await client.post(path, json=body, headers=bearer(user))
    assert created.status_code == 201, created.text
    return str(created.json()["id"])


async def _start(client: httpx.AsyncClient, path: str, body: dict[str, str]) -> str:
    started = await client.post(path, json=body, headers=bearer("alice"))
    assert started.status_code == 202, started.text
    return str(started.json()["operation_id"])


async def _finish(services: Services, task_type: str, subject: str) -> Claimed:
    """The worker's run of the one queued analysis of ``task_type``: claim, publish, complete."""
    claimed = await asyncio.to_thread(claim, services, [task_type])
    answer = {"fit_score": 70}
    await asyncio.to_thread(publish, services, claimed, answer, kind=task_type, subject=subject)
    await asyncio.to_thread(complete, services, claimed)
    return claimed


def test_a_deleted_job_is_gone_with_its_results_and_its_operations_stay(
    services: Services,
) -> None:
    entitle(services.db, "alice")

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            alice = bearer("alice")
            job = await _create(client, "/api/jobs", JOB, "alice")
            kept = await _create(client, "/api/jobs", JOB, "alice")
            operation = await _start(client, f"/api/jobs/{job}/strategy-snapshot", {})
            await _finish(services, SNAPSHOT, "job")
            assert _held(services.db, "alice") == (2, 0, 2 * JOB_BYTES)

            deleted = await client.delete(f"/api/jobs/{job}", headers=alice)
            assert (deleted.status_code, deleted.content) == (204, b"")
            _problem(await client.get(f"/api/jobs/{job}", headers=alice), 404, "job_not_found")
            listed = (await client.get("/api/jobs", headers=alice)).json()
            assert [item["id"] for item in listed["items"]] == [kept]
            assert _held(services.db, "alice") == (1, 0, JOB_BYTES)
            # Its result went with it; the operation and its notification stay.
            result = await client.get(f"/api/operations/{operation}/result", headers=alice)
            _problem(result, 404, "result_not_found")
            finished = (await client.get(f"/api/operations/{operation}", headers=alice)).json()
            assert (finished["state"], finished["subject"]) == (
                "succeeded",
                {"type": "job", "id": job},
            )
            notes = (await client.get("/api/notifications", headers=alice)).json()["items"]
            assert [item["operation_id"] for item in notes] == [operation]
            # Deleted once: again, or an analysis of it, is a 404 like any missing job.
            again = await client.delete(f"/api/jobs/{job}", headers=alice)
            _problem(again, 404, "job_not_found")
            restart = await client.post(f"/api/jobs/{job}/strategy-snapshot", headers=alice)
            _problem(restart, 404, "job_not_found")

    with capture_logs() as logs:
        run(scenario())
    assert _results(services.db) == 0
    assert _deleted_lines(logs, "job_deleted") == [
        {"results": 1, "drafts": 0, "stored_bytes": JOB_BYTES}
    ]


def test_a_deleted_cv_takes_every_result_made_with_it(services: Services) -> None:
    """Privacy first: a job's snapshot made with the CV quotes it, and goes too; the same
    job's snapshot made without it stays, as does the job."""
    entitle(services.db, "alice")

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            alice = bearer("alice")
            job = await _create(client, "/api/jobs", JOB, "alice")
            cv = await _create(client, "/api/attachments", CV, "alice")
            snapshot = f"/api/jobs/{job}/strategy-snapshot"
            with_cv = await _start(client, snapshot, {"attachment_id": cv})
            await _finish(services, SNAPSHOT, "job")
            without = await _start(client, snapshot, {})
            await _finish(services, SNAPSHOT, "job")
            review = await _start(client, f"/api/attachments/{cv}/cv-review", {"job_id": job})
            await _finish(services, REVIEW, "attachment")
            assert _results(services.db) == 3

            deleted = await client.delete(f"/api/attachments/{cv}", headers=alice)
            assert deleted.status_code == 204, deleted.text
            gone = await client.get(f"/api/attachments/{cv}", headers=alice)
            _problem(gone, 404, "attachment_not_found")
            for operation in (with_cv, review):
                result = await client.get(f"/api/operations/{operation}/result", headers=alice)
                _problem(result, 404, "result_not_found")
            newest = (await client.get(snapshot, headers=alice)).json()["snapshot"]
            assert newest["operation_id"] == without
            assert (await client.get(f"/api/jobs/{job}", headers=alice)).status_code == 200
            assert _held(services.db, "alice") == (1, 0, JOB_BYTES)

    with capture_logs() as logs:
        run(scenario())
    assert _results(services.db) == 1
    assert _deleted_lines(logs, "attachment_deleted") == [
        {"results": 2, "drafts": 0, "stored_bytes": CV_BYTES}
    ]


def test_delete_is_refused_while_an_analysis_uses_the_row_until_it_is_cancelled(
    services: Services,
) -> None:
    """409 ``analysis_active`` naming the operation, for its subject and for its second
    reference alike, queued or running; once cancelled, 204."""
    entitle(services.db, "alice")

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            alice = bearer("alice")
            job = await _create(client, "/api/jobs", JOB, "alice")
            cv = await _create(client, "/api/attachments", CV, "alice")
            queued = await _start(
                client, f"/api/jobs/{job}/strategy-snapshot", {"attachment_id": cv}
            )
            for path, label in ((f"/api/jobs/{job}", "job"), (f"/api/attachments/{cv}", "CV")):
                refused = _problem(await client.delete(path, headers=alice), 409, "analysis_active")
                assert refused["operation_id"] == queued
                assert refused["detail"] == (
                    f"An analysis that uses this {label} is still queued;"
                    f" cancel it first, then delete the {label}."
                )
            cancelled = await client.post(f"/api/operations/{queued}/cancel", headers=alice)
            assert cancelled.json()["state"] == "cancelled"

            running = await _start(client, f"/api/attachments/{cv}/cv-review", {})
            claimed = await asyncio.to_thread(claim, services, [REVIEW])
            refused = _problem(
                await client.delete(f"/api/attachments/{cv}", headers=alice), 409, "analysis_active"
            )
            assert refused["operation_id"] == running
            assert "still running" in refused["detail"]
            await client.post(f"/api/operations/{running}/cancel", headers=alice)
            stopping = _problem(
                await client.delete(f"/api/attachments/{cv}", headers=alice), 409, "analysis_active"
            )
            assert stopping["detail"] == (
                "An analysis that uses this CV is being cancelled;"
                " delete the CV once it has stopped."
            )
            await asyncio.to_thread(acknowledge_cancel, services, claimed)  # it stopped

            for path in (f"/api/jobs/{job}", f"/api/attachments/{cv}"):
                assert (await client.delete(path, headers=alice)).status_code == 204
            assert _held(services.db, "alice") == (0, 0, 0)

    run(scenario())


def test_another_owners_row_is_not_found_and_stays(services: Services) -> None:
    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            job = await _create(client, "/api/jobs", JOB, "alice")
            cv = await _create(client, "/api/attachments", CV, "alice")
            for path, code in (
                (f"/api/jobs/{job}", "job_not_found"),
                (f"/api/attachments/{cv}", "attachment_not_found"),
            ):
                theirs = await client.delete(path, headers=bearer("bob"))
                missing = await client.delete(path[:-32] + "0" * 32, headers=bearer("bob"))
                assert _problem(theirs, 404, code) == _problem(missing, 404, code)
                assert (await client.get(path, headers=bearer("alice"))).status_code == 200
            assert _held(services.db, "alice") == (1, 1, JOB_BYTES + CV_BYTES)

    run(scenario())


def test_a_delete_makes_room_under_the_quota(services: Services) -> None:
    """An account at its bound (the count set there rather than filled with 2,000 jobs)
    is refused a create; deleting one job makes room for the next."""

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            alice = bearer("alice")
            job = await _create(client, "/api/jobs", JOB, "alice")
            _set_held(services.db, "alice", jobs=bounds.OWNER_JOBS_MAX)
            over = await client.post("/api/jobs", json=JOB, headers=alice)
            refusal = _problem(over, 429, STORAGE_QUOTA_EXCEEDED)["detail"]
            assert refusal.endswith("delete a job you no longer need to make room.")
            assert (await client.delete(f"/api/jobs/{job}", headers=alice)).status_code == 204
            assert _held(services.db, "alice") == (bounds.OWNER_JOBS_MAX - 1, 0, 0)
            assert (await client.post("/api/jobs", json=JOB, headers=alice)).status_code == 201

    run(scenario())


def test_only_the_users_gateway_deletes(services: Services) -> None:
    job = create_job(services.workspace, "alice")
    cv = create_cv(services.workspace, "alice")
    for role in (Role.WORKER, Role.PRODUCER):
        for call in (
            lambda md: services.workspace.DeleteJob(wpb.DeleteJobRequest(job_id=job), metadata=md),
            lambda md: services.workspace.DeleteAttachment(
                wpb.DeleteAttachmentRequest(attachment_id=cv), metadata=md
            ),
        ):
            with pytest.raises(grpc.RpcError) as refused:
                call(metadata(role, "alice"))
            assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert _held(services.db, "alice") == (1, 1, JOB_BYTES + CV_BYTES)


def test_an_operators_retry_of_an_analysis_of_a_deleted_job_or_cv_is_refused(
    services: Services,
) -> None:
    """FAILED_PRECONDITION ``subject_gone`` (ADR 65), the operation left as it was, its
    notification too, as the owner's retry is refused (404). It was queued: the worker
    failed it ``subject_not_found``, and its owner was told again "could not be completed"
    of an analysis of what they had deleted. One whose rows are all there is retried."""
    entitle(services.db, "alice")
    alice, ops = metadata(Role.GATEWAY, "alice"), OpsClient(services)
    operator = metadata(Role.OPERATOR, subject="ops-carol")
    job, kept_job = create_job(services.workspace, "alice"), create_job(services.workspace, "alice")
    cv = create_cv(services.workspace, "alice")

    def cancelled_analysis(job_id: str, cv_id: str = "") -> str:
        admitted = services.admission.Admit(snapshot_request(job_id, cv_id), metadata=alice)
        return ops.cancel("alice", admitted.operation.id).id

    of_job, with_cv, kept = (
        cancelled_analysis(job),
        cancelled_analysis(kept_job, cv),
        cancelled_analysis(kept_job),
    )
    services.workspace.DeleteJob(wpb.DeleteJobRequest(job_id=job), metadata=alice)
    services.workspace.DeleteAttachment(
        wpb.DeleteAttachmentRequest(attachment_id=cv), metadata=alice
    )

    def by_operator(operation_id: str) -> opb.OperatorOperation:
        retried: opb.OperatorOperation = services.operator.RetryOperation(
            opb.RetryOperationRequest(operation_id=operation_id), metadata=operator
        )
        return retried

    for operation_id, label in ((of_job, "job"), (with_cv, "CV")):
        refused = expect_failure(
            partial(by_operator, operation_id), grpc.StatusCode.FAILED_PRECONDITION, SUBJECT_GONE
        )
        assert refused.details == f"the {label} it reads was deleted: it cannot run again"
        assert ops.row(operation_id).state == "cancelled"
        assert [row.outcome for row in ops.notification_rows(operation_id)] == ["cancelled"]
    assert by_operator(kept).operation.state == QUEUED
    assert ops.unread("alice") == 2  # the retried one's notification is taken back


# ---- storage --------------------------------------------------------------------------------

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def _job(database: Database, owner: str = "alice") -> str:
    return database.run(
        lambda tx: workspace.create_job(tx, JOB["title"], JOB["company"], JOB["description"], NOW),
        owner_id=owner,
    ).id


def test_the_give_back_never_takes_a_count_below_zero(database: Database) -> None:
    job = _job(database)
    _set_held(database, "alice", jobs=0, stored_bytes=JOB_BYTES - 1)
    gone = database.run(lambda tx: workspace.delete_job(tx, job), owner_id="alice")
    assert gone == workspace.Deleted(results=0, drafts=0, stored_bytes=JOB_BYTES)
    assert _held(database, "alice") == (0, 0, 0)


def test_the_drafts_of_the_operations_that_read_the_row_go_with_it(database: Database) -> None:
    """A draft left behind by an ended operation (retention would remove it a day later)
    quotes the row: it goes with the row, another row's stays."""
    entitle(database, "alice")
    job, other = _job(database), _job(database)
    limits = Limits(per_user=4, global_=8)

    def analysis_of(row: str) -> str:
        request = AdmitRequest(SNAPSHOT, row)
        return database.run(lambda tx: admit(tx, request, limits, NOW)[0].id, owner_id="alice")

    ops = [analysis_of(row) for row in (job, other)]
    with database.engine.begin() as connection:
        connection.execute(update(OPS).where(OPS.c.id.in_(ops)).values(state="cancelled"))
        for operation in ops:
            connection.execute(
                DRAFTS.insert().values(
                    operation_id=operation,
                    owner_user_id="alice",
                    attempt=1,
                    lease_token_hash="0" * 64,
                    body="{",
                    updated_at=NOW,
                )
            )
    gone = database.run(lambda tx: workspace.delete_job(tx, job), owner_id="alice")
    assert gone.drafts == 1
    left = scalar(database, select(DRAFTS.c.operation_id))
    assert left == ops[1]


@pytest.mark.parametrize(
    ("state", "words"),
    [
        ("waiting_for_retry", "waiting to try again"),
        ("waiting_for_external_fallback", "waiting for the external model"),
    ],
)
def test_a_delete_names_an_analysis_waiting_to_run_again(
    database: Database, state: str, words: str
) -> None:
    """Between its attempts an analysis still reads the job: the refusal says what it
    waits for, as it does for one queued or running."""
    entitle(database, "alice")
    job = _job(database)
    request = AdmitRequest(SNAPSHOT, job)
    limits = Limits(per_user=4, global_=8)
    operation = database.run(lambda tx: admit(tx, request, limits, NOW)[0].id, owner_id="alice")
    with database.engine.begin() as connection:
        connection.execute(update(OPS).where(OPS.c.id == operation).values(state=state))
    with pytest.raises(InUse) as refused:
        database.run(lambda tx: workspace.delete_job(tx, job), owner_id="alice")
    assert refused.value.operation_id == operation
    assert refused.value.message == (
        f"An analysis that uses this job is still {words}; cancel it first, then delete the job."
    )


# ---- a delete racing an admission -------------------------------------------------------------

HOLD_SECONDS = 0.5


def _holding(
    database: Database,
    work: Callable[[Tx], T],
    release: threading.Event,
    owner: str | None = "alice",
) -> Callable[[], T]:
    """``work`` in one transaction that stays open, after ``work``, until ``release``."""

    def transaction(tx: Tx) -> T:
        done = work(tx)
        release.wait(10)
        return done

    return lambda: database.run(transaction, owner_id=owner)


def _second_waits_for_first(
    pool: ThreadPoolExecutor,
    first: Callable[[], Any],
    second: Callable[[], T],
    release: threading.Event,
) -> Future[T]:
    """Run ``first`` (its transaction held open), then ``second``: ``second`` must wait
    for ``first`` to commit, however long it holds."""
    held = pool.submit(first)
    time.sleep(HOLD_SECONDS)  # first's statements have run: it waits for the release
    after = pool.submit(second)
    time.sleep(HOLD_SECONDS)
    assert not after.done(), "the second transaction did not wait for the first"
    release.set()
    held.result(timeout=30)
    return after


def test_an_admission_first_makes_a_racing_delete_refused(database: Database) -> None:
    entitle(database, "alice")
    job = _job(database)
    release = threading.Event()
    request = AdmitRequest(SNAPSHOT, job)
    limits = Limits(per_user=4, global_=8)
    with ThreadPoolExecutor(2) as pool:
        after = _second_waits_for_first(
            pool,
            _holding(database, lambda tx: admit(tx, request, limits, NOW)[0].id, release),
            lambda: database.run(lambda tx: workspace.delete_job(tx, job), owner_id="alice"),
            release,
        )
        with pytest.raises(InUse) as refused:
            after.result(timeout=30)
    operation = scalar(database, select(UserOperation.id))
    assert refused.value.operation_id == operation
    assert (
        database.run(
            lambda tx: workspace.get_job(tx, job, lease=None, now=NOW), owner_id="alice"
        ).id
        == job
    )


def test_a_delete_first_makes_a_racing_admission_not_found(database: Database) -> None:
    entitle(database, "alice")
    job = _job(database)
    release = threading.Event()
    request = AdmitRequest(SNAPSHOT, job)
    limits = Limits(per_user=4, global_=8)
    with ThreadPoolExecutor(2) as pool:
        after = _second_waits_for_first(
            pool,
            _holding(database, lambda tx: workspace.delete_job(tx, job), release),
            lambda: database.run(lambda tx: admit(tx, request, limits, NOW), owner_id="alice"),
            release,
        )
        with pytest.raises(NotFound) as refused:
            after.result(timeout=30)
    assert refused.value.code == "job_not_found"
    assert scalar(database, select(func.count()).select_from(UserOperation)) == 0


def _cancelled_analysis(database: Database, job: str) -> str:
    request = AdmitRequest(SNAPSHOT, job)
    limits = Limits(per_user=4, global_=8)
    operation = database.run(lambda tx: admit(tx, request, limits, NOW)[0].id, owner_id="alice")
    database.run(partial(operations.cancel, operation_id=operation, now=NOW), owner_id="alice")
    return operation


def _operator_retry(operation_id: str) -> Callable[[Tx], UserOperation]:
    return lambda tx: operator_retry(OperatorTx(tx), operation_id, NOW)


def test_an_operators_retry_first_makes_a_racing_delete_refused(database: Database) -> None:
    entitle(database, "alice")
    job = _job(database)
    operation = _cancelled_analysis(database, job)
    release = threading.Event()
    with ThreadPoolExecutor(2) as pool:
        after = _second_waits_for_first(
            pool,
            _holding(database, _operator_retry(operation), release, owner=None),
            lambda: database.run(lambda tx: workspace.delete_job(tx, job), owner_id="alice"),
            release,
        )
        with pytest.raises(InUse) as refused:
            after.result(timeout=30)
    assert refused.value.operation_id == operation


def test_a_delete_first_makes_a_racing_operators_retry_refused(database: Database) -> None:
    entitle(database, "alice")
    job = _job(database)
    operation = _cancelled_analysis(database, job)
    release = threading.Event()
    with ThreadPoolExecutor(2) as pool:
        after = _second_waits_for_first(
            pool,
            _holding(database, lambda tx: workspace.delete_job(tx, job), release),
            lambda: database.run(_operator_retry(operation), owner_id=None),
            release,
        )
        with pytest.raises(InvalidTransition) as refused:
            after.result(timeout=30)
    assert refused.value.code == SUBJECT_GONE
    assert scalar(database, select(UserOperation.state)) == "cancelled"
