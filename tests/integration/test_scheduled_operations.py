"""Scheduled operations (issue 37 point 2, ADR 0046) through the real services, both engines.

Time moves only by ``ManualClock.advance``, and the sweeper runs only when a test calls
``services.sweep()``: an operation scheduled for ``t`` is held out of the claim's line
and never claimed while the clock reads before ``t``; the first sweep after ``t`` lets it
in (ADR 0050), and a claim waiting then is woken by it, long before its own wait runs out.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta

import grpc
from google.longrunning import operations_pb2_grpc as lro_grpc
from google.longrunning import operations_proto_pb2 as lro

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.gateway import dto
from durable_ops.model import bounds
from durable_ops.model.tasks import STRATEGY_SNAPSHOT
from tests.support.clock import ManualClock
from tests.support.gateway import bearer, gateway_client, make_app, run
from tests.support.grpc_services import Services
from tests.support.operations_client import (
    ALICE,
    BOB,
    CANCELLED,
    QUEUED,
    OpsClient,
    expect_failure,
)
from tests.support.workspace_client import JOB_TEXT, entitle

INVALID = grpc.StatusCode.INVALID_ARGUMENT
WAIT_SECONDS = 10.0
JOB = {"title": "Engineer", "company": "Acme", "description": JOB_TEXT}


def test_a_scheduled_operation_is_queued_but_never_claimed_before_its_time(
    clock: ManualClock, services: Services, ops: OpsClient
) -> None:
    due = clock() + timedelta(minutes=5)
    created = ops.create(ALICE, "later", not_before=due)
    assert created.state == QUEUED
    assert created.not_before.ToDatetime().replace(tzinfo=due.tzinfo) == due
    assert ops.claim() is None
    clock.advance(299.9)
    assert services.sweep().promoted == 0  # not due yet: still held
    assert ops.claim() is None
    clock.advance(0.1)
    assert services.sweep().promoted == 1  # due: let into the claim's line
    lease = ops.claim_one()
    assert lease.id == created.id
    assert lease.operation.not_before == created.not_before  # the owner still sees it


def test_an_operation_without_not_before_shows_none(ops: OpsClient) -> None:
    created = ops.create(ALICE, "now")
    assert not created.HasField("not_before")
    assert ops.claim_one().id == created.id


def test_a_waiting_claim_takes_it_at_the_first_sweep_after_its_time(
    clock: ManualClock, services: Services, ops: OpsClient, pool: ThreadPoolExecutor
) -> None:
    created = ops.create(ALICE, "soon", not_before=clock() + timedelta(seconds=30))
    waiting = pool.submit(ops.claim, wait_seconds=WAIT_SECONDS)
    time.sleep(0.5)  # ten claim polls: none may take it early
    services.sweep()
    assert not waiting.done()
    clock.advance(30)
    services.sweep()
    swept = time.monotonic()
    lease = waiting.result(timeout=WAIT_SECONDS)
    answered_after = time.monotonic() - swept
    assert lease is not None
    assert lease.id == created.id
    # Woken by the sweep, not by the end of the wait (a functional bound; the figure is
    # the sweep interval, 1 s, after its time).
    assert answered_after < WAIT_SECONDS / 2


def test_a_due_scheduled_operation_joins_its_priority_line_at_its_time(
    clock: ManualClock, services: Services, ops: OpsClient
) -> None:
    scheduled = ops.create(ALICE, "at-10", not_before=clock() + timedelta(seconds=10))
    clock.advance(5)
    earlier = ops.create(BOB, "at-5")  # due before the scheduled one: goes first
    clock.advance(5)
    assert services.sweep().let_in == 1  # at its time it joins the line, with alice's turn
    clock.advance(5)
    alices_next = ops.create(ALICE, "at-15")  # alice's next turn is after her scheduled one
    taken = [ops.claim_one().id for _ in range(3)]
    assert taken == [earlier.id, scheduled.id, alices_next.id]


def test_a_scheduled_operation_cancelled_before_its_time_is_not_let_in_at_it(
    clock: ManualClock, services: Services, ops: OpsClient
) -> None:
    """Ended while held, it keeps its time (a retry before it keeps it too): the sweep at
    that time has nothing to let into the line, and wakes and reports nothing."""
    created = ops.create(ALICE, "cancelled-early", not_before=clock() + timedelta(seconds=10))
    assert ops.cancel(ALICE, created.id).state == CANCELLED
    clock.advance(10)
    assert services.sweep().promoted == 0
    assert ops.get(ALICE, created.id).state == CANCELLED


def test_a_not_before_in_the_past_means_now_and_jumps_no_line(
    clock: ManualClock, ops: OpsClient
) -> None:
    first = ops.create(ALICE, "first")
    clock.advance(1)
    backdated = ops.create(BOB, "backdated", not_before=clock() - timedelta(days=1))
    assert not backdated.HasField("not_before")  # claimable from its creation
    assert [ops.claim_one().id, ops.claim_one().id] == [first.id, backdated.id]


def test_the_horizon_is_thirty_days(clock: ManualClock, ops: OpsClient) -> None:
    edge = clock() + bounds.NOT_BEFORE_MAX_AHEAD
    assert ops.create(ALICE, "edge", not_before=edge).not_before.seconds == int(edge.timestamp())
    beyond = edge + timedelta(seconds=1)
    failure = expect_failure(
        lambda: ops.create(ALICE, "beyond", not_before=beyond),
        INVALID,
        bounds.NOT_BEFORE_TOO_FAR,
        field="not_before",
    )
    assert "30 days" in failure.details


def test_the_deadline_counts_from_not_before(clock: ManualClock, ops: OpsClient) -> None:
    due = clock() + timedelta(hours=2)
    # 25 h from now is 23 h after the operation is due: allowed.
    ops.create(ALICE, "long", not_before=due, deadline=clock() + timedelta(hours=25))
    expect_failure(
        lambda: ops.create(ALICE, "before-due", not_before=due, deadline=due - timedelta(hours=1)),
        INVALID,
        field="deadline",
    )
    expect_failure(
        lambda: ops.create(ALICE, "too-long", not_before=due, deadline=due + timedelta(hours=25)),
        INVALID,
        field="deadline",
    )


def test_the_same_key_with_another_not_before_is_another_request(
    clock: ManualClock, ops: OpsClient
) -> None:
    due = clock() + timedelta(hours=1)
    first = ops.create(ALICE, "k", not_before=due)
    again = ops.create_raw(ALICE, ops.create_request("k", not_before=due))
    assert (again.created, again.operation.id) == (False, first.id)
    expect_failure(
        lambda: ops.create(ALICE, "k", not_before=due + timedelta(minutes=1)),
        grpc.StatusCode.ALREADY_EXISTS,
    )


def test_google_longrunning_metadata_shows_not_before(
    clock: ManualClock, services: Services, ops: OpsClient
) -> None:
    created = ops.create(ALICE, "lro-later", not_before=clock() + timedelta(hours=1))
    stub = lro_grpc.OperationsStub(services.channel)  # type: ignore[no-untyped-call]
    found: lro.Operation = stub.GetOperation(
        lro.GetOperationRequest(name=f"operations/{created.id}"), metadata=ops.gateway(ALICE)
    )
    metadata = pb.Operation()
    assert found.metadata.Unpack(metadata)
    assert metadata.not_before == created.not_before


# ---- over HTTP: an analysis started for later ---------------------------------------------


def test_an_analysis_started_over_http_for_later_shows_when_and_counts_its_budget_from_it(
    clock: ManualClock, services: Services
) -> None:
    entitle(services.db, "alice")
    due = (clock() + timedelta(hours=3)).replace(microsecond=0)

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            job = await client.post("/api/jobs", json=JOB, headers=bearer("alice"))
            path = f"/api/jobs/{job.json()['id']}/strategy-snapshot"
            body = {"not_before": due.isoformat().replace("+00:00", "Z")}
            started = await client.post(path, json=body, headers=bearer("alice"))
            assert started.status_code == 202, started.text
            status = (
                await client.get(started.json()["status_url"], headers=bearer("alice"))
            ).json()
            assert dto.parse_rfc3339(status["not_before"]) == due
            budget = STRATEGY_SNAPSHOT.time_budget
            assert dto.parse_rfc3339(status["deadline_at"]) == due + budget

            other = await client.post("/api/jobs", json=JOB, headers=bearer("alice"))
            other_path = f"/api/jobs/{other.json()['id']}/strategy-snapshot"
            too_far = clock() + bounds.NOT_BEFORE_MAX_AHEAD + timedelta(minutes=1)
            refused = await client.post(
                other_path, json={"not_before": too_far.isoformat()}, headers=bearer("alice")
            )
            assert refused.status_code == 400, refused.text
            assert refused.json()["code"] == bounds.NOT_BEFORE_TOO_FAR
            assert "30 days" in refused.json()["detail"]
            garbled = await client.post(
                other_path, json={"not_before": "tomorrow"}, headers=bearer("alice")
            )
            assert garbled.status_code == 400, garbled.text
            assert garbled.json()["code"] == "invalid_argument"

    run(scenario())
    assert OpsClient(services).claim(("strategy.snapshot",)) is None  # not before 3 h


def test_a_start_over_http_says_it_reused_an_analysis_and_when_that_one_runs(
    clock: ManualClock, services: Services
) -> None:
    """A subject's active analysis answers a start (202, the same id), and the body says so
    with the time it runs, also to a start naming another time, whose time used to be
    dropped without a word."""
    entitle(services.db, "alice")
    due = (clock() + timedelta(hours=3)).replace(microsecond=0)
    other_time = due + timedelta(hours=1)

    def at(when: datetime) -> dict[str, str]:
        return {"not_before": dto.rfc3339(when)}

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            alice = bearer("alice")
            job = await client.post("/api/jobs", json=JOB, headers=alice)
            path = f"/api/jobs/{job.json()['id']}/strategy-snapshot"
            started = await client.post(path, json=at(due), headers=alice)
            assert started.status_code == 202, started.text
            first = started.json()
            assert (first["reused"], first["not_before"]) == (False, dto.rfc3339(due))
            # Look again not before its time (about 3 h), not in a second.
            assert 3 * 3600 - 60 < int(started.headers["Retry-After"]) <= 3 * 3600
            for body in ({}, at(due)):  # no time, or the same one
                again = await client.post(path, json=body, headers=alice)
                assert again.status_code == 202, again.text
                assert again.json() == {**first, "reused": True}

            elsewhen = await client.post(path, json=at(other_time), headers=alice)
            assert elsewhen.status_code == 202, elsewhen.text
            assert elsewhen.json() == {**first, "reused": True}  # it runs at its own time

            keyed = {**alice, "Idempotency-Key": "plan-1"}
            other = await client.post("/api/jobs", json=JOB, headers=alice)
            other_path = f"/api/jobs/{other.json()['id']}/strategy-snapshot"
            started_now = await client.post(other_path, headers=keyed)
            assert started_now.headers["Retry-After"] == "1"
            now = started_now.json()
            assert (now["reused"], now["not_before"]) == (False, None)
            replay = await client.post(other_path, headers=keyed)
            assert replay.json() == {**now, "reused": True}
            changed = await client.post(other_path, json=at(other_time), headers=keyed)
            assert changed.status_code == 409, changed.text
            assert changed.json()["code"] == "idempotency_conflict"

    run(scenario())
    assert OpsClient(services).claim(("strategy.snapshot",)) is not None  # the one due now
    assert OpsClient(services).claim(("strategy.snapshot",)) is None  # the other: in 3 h


def test_the_status_of_an_analysis_scheduled_for_later_says_look_again_at_its_time(
    clock: ManualClock, services: Services
) -> None:
    """``GET /api/operations/{id}`` and its ``:wait`` said ``Retry-After: 1`` of an analysis
    due in two days; the 202 of its start already said its time (ADR 58)."""
    entitle(services.db, "alice")
    due = (clock() + timedelta(days=2)).replace(microsecond=0)

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            alice = bearer("alice")
            job = await client.post("/api/jobs", json=JOB, headers=alice)
            path = f"/api/jobs/{job.json()['id']}/strategy-snapshot"
            started = await client.post(path, json={"not_before": dto.rfc3339(due)}, headers=alice)
            assert started.status_code == 202, started.text
            status_url = started.json()["status_url"]
            for url in (status_url, f"{status_url}:wait?timeout=0"):
                status = await client.get(url, headers=alice)
                assert status.json()["state"] == "queued", status.text
                assert 2 * 86400 - 60 < int(status.headers["Retry-After"]) <= 2 * 86400, url

            other = await client.post("/api/jobs", json=JOB, headers=alice)
            now = await client.post(
                f"/api/jobs/{other.json()['id']}/strategy-snapshot", headers=alice
            )
            due_now = await client.get(now.json()["status_url"], headers=alice)
            assert due_now.headers["Retry-After"] == "1"  # a worker may take it any moment

    run(scenario())


def test_a_start_that_reuses_an_ended_analysis_has_no_retry_after(
    clock: ManualClock, services: Services
) -> None:
    """The same Idempotency-Key again after its analysis ended answers that analysis (202,
    ``reused``, as the first answer was), without the ``Retry-After: 1`` it had: its status
    will not move again."""
    entitle(services.db, "alice")

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            alice = bearer("alice")
            keyed = {**alice, "Idempotency-Key": "ended-1"}
            job = await client.post("/api/jobs", json=JOB, headers=alice)
            path = f"/api/jobs/{job.json()['id']}/strategy-snapshot"
            first = await client.post(path, headers=keyed)
            assert (first.status_code, first.headers["Retry-After"]) == (202, "1"), first.text
            operation_id = first.json()["operation_id"]
            cancel = await client.post(f"/api/operations/{operation_id}/cancel", headers=alice)
            assert cancel.json()["state"] == "cancelled", cancel.text
            again = await client.post(path, headers=keyed)
            assert again.status_code == 202, again.text
            assert again.json() == {**first.json(), "reused": True}
            assert "Retry-After" not in again.headers
            assert again.headers["Location"] == first.headers["Location"]
            ended = await client.get(first.json()["status_url"], headers=alice)
            assert "Retry-After" not in ended.headers

    run(scenario())
