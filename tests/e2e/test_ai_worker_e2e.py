"""The AI worker end to end: real processes on loopback, driven over gRPC.

Every test starts its own stack (``tests.support.ai_stack``) on its own
database with a 5-second lease and a 0.2-second sweep. The happy path and the
crash drill run on both engines; the rest on SQLite, to keep the suite short.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from durable_ops import hoststore
from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.clock import utc_now
from durable_ops.storage import budgets
from durable_ops.storage.schema import OperationAttempt
from tests.conftest import MakeDatabase
from tests.support import stored
from tests.support.ai_stack import (
    CV_REVIEW,
    STRATEGY,
    AiStack,
    ModelServer,
    ai_stack,
    closed_port_url,
    wait_for,
)
from tests.support.prompts import validate_answer

pytestmark = pytest.mark.slow

ALICE = "alice"
BOB = "bob"
LEASE_SECONDS = 5
QUEUED = pb.OPERATION_STATE_QUEUED
RUNNING = pb.OPERATION_STATE_RUNNING
WAITING_FOR_RETRY = pb.OPERATION_STATE_WAITING_FOR_RETRY
SUCCEEDED = pb.OPERATION_STATE_SUCCEEDED
FAILED = pb.OPERATION_STATE_FAILED
CANCELLED = pb.OPERATION_STATE_CANCELLED


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'ops.sqlite3'}"


@pytest.fixture(params=["sqlite", pytest.param("mariadb", marks=pytest.mark.mariadb)])
def any_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ops.sqlite3'}"
    make: MakeDatabase = request.getfixturevalue("copy_of_migrated_mariadb")
    return make()


@pytest.fixture
def slow_model() -> Iterator[ModelServer]:
    model = ModelServer(delay_seconds=30)
    yield model
    model.stop()


def _outcomes(st: AiStack, owner: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for notification in st.notifications_of(owner):
        found.setdefault(notification.operation_id, []).append(notification.outcome)
    return found


def _assert_failed_once_without_note(st: AiStack, owner: str, operation_id: str) -> None:
    assert st.count_notes(operation_id) == 0
    assert _outcomes(st, owner)[operation_id] == ["failed"]


def test_admitted_work_is_published_notified_and_found(any_db_url: str) -> None:
    with ai_stack(any_db_url, dev_model=True) as st:
        st.entitle(ALICE)
        job, cv = st.create_job(ALICE), st.create_cv(ALICE)
        admitted = time.monotonic()
        snapshot = st.admit(ALICE, STRATEGY, job, context_ref=cv)
        st.wait_state(ALICE, snapshot, SUCCEEDED, timeout=20)
        print(f"\nadmit -> succeeded on the dev model: {time.monotonic() - admitted:.3f} s")
        review = st.admit(ALICE, CV_REVIEW, cv, context_ref=job)
        st.wait_state(ALICE, review, SUCCEEDED, timeout=20)

        note = st.notes_of(ALICE, STRATEGY, "job", job)
        assert note is not None
        assert note.operation_id == snapshot
        body = json.loads(note.body_json)
        assert validate_answer(STRATEGY, body) == body
        assert body["fit_score"] > 0  # the CV (context_ref) was read, not only the job
        # The result names what made it: the worker's model, the operation's CV by its name.
        assert (note.model, note.route) == ("dev-heuristic", "local")
        assert (note.context_ref, note.context_name) == (cv, "cv.txt")
        review_note = st.notes_of(ALICE, CV_REVIEW, "attachment", cv)
        assert review_note is not None
        assert review_note.operation_id == review
        assert validate_answer(CV_REVIEW, json.loads(review_note.body_json))
        assert (review_note.context_ref, review_note.context_name) == (job, "Senior Data Engineer")

        found = st.lookup(ALICE, STRATEGY, job)
        assert found is not None
        assert (found.id, found.state, found.attempt) == (snapshot, SUCCEEDED, 1)
        row = st.row(snapshot)
        assert (row.provider, row.model, row.route) == ("127.0.0.1", "dev-heuristic", "local")
        assert row.result_ref == note.id
        assert _outcomes(st, ALICE) == {snapshot: ["succeeded"], review: ["succeeded"]}
        assert (st.count_notes(snapshot), st.count_notes(review)) == (1, 1)
        assert st.notes_of(BOB, STRATEGY, "job", job) is None  # the owner's only

        # The day's budget spent what the worker reported, and holds nothing back (ADR 41).
        used = st.db.run(
            lambda tx: budgets.day_use(tx, utc_now().date()), owner_id=ALICE, write=False
        )
        spent = sum(
            st.row(done).prompt_tokens + st.row(done).completion_tokens
            for done in (snapshot, review)
        )
        assert (used.reserved, used.spent) == (0, spent)
        assert spent > 0


def test_heartbeats_outlast_the_lease_and_a_cancel_stops_the_inference(sqlite_url: str) -> None:
    model = ModelServer(delay_seconds=LEASE_SECONDS + 2)
    try:
        with ai_stack(sqlite_url, OPS_AI_LOCAL_URL=model.url) as st:
            st.entitle(ALICE)
            outlasting = st.admit(ALICE, STRATEGY, st.create_job(ALICE))
            # Longer than the lease: only the heartbeat stream keeps the sweeper away.
            final = st.wait_state(ALICE, outlasting, SUCCEEDED, timeout=LEASE_SECONDS + 10)
            assert final.attempt == 1

            model.config.delay_seconds = 30
            cancelled = st.admit(ALICE, STRATEGY, st.create_job(ALICE))
            wait_for(lambda: model.completions == 2, timeout=10, what="the inference")
            asked = time.monotonic()
            requested = st.cancel(ALICE, cancelled)
            assert (requested.state, requested.cancel_requested) == (RUNNING, True)

            st.wait_state(ALICE, cancelled, CANCELLED, timeout=LEASE_SECONDS)
            # A heartbeat carries the request within a third of the lease, not the 30 s model.
            assert time.monotonic() - asked < LEASE_SECONDS
            st.wait_worker_event("operation_cancelled")
            assert st.count_notes(cancelled) == 0
            assert _outcomes(st, ALICE) == {outlasting: ["succeeded"], cancelled: ["cancelled"]}
            assert model.completions == 2
    finally:
        model.stop()


def test_killed_worker_is_replaced_and_the_work_done_once(
    any_db_url: str, slow_model: ModelServer, tmp_path: Path
) -> None:
    store = tmp_path / "host-store"
    store.mkdir(mode=0o700)
    with ai_stack(
        any_db_url,
        OPS_AI_LOCAL_URL=slow_model.url,
        OPS_HOST_STORE_DIR=str(store),
        OPS_HOST_ID="e2e-host",
    ) as st:
        st.entitle(ALICE)
        job = st.create_job(ALICE)
        operation_id = st.admit(ALICE, STRATEGY, job)
        wait_for(lambda: slow_model.completions == 1, timeout=10, what="the inference")

        st.stack.kill("ai-worker")
        slow_model.config.delay_seconds = 0
        st.stack.start_one("ai-worker")
        final = st.wait_state(ALICE, operation_id, SUCCEEDED, timeout=30)

        assert final.attempt == 2  # the lease expired; the sweeper made the attempt retryable
        assert st.count_notes(operation_id) == 1
        note = st.notes_of(ALICE, STRATEGY, "job", job)
        assert note is not None
        assert note.operation_id == operation_id
        assert _outcomes(st, ALICE) == {operation_id: ["succeeded"]}
        reconciled = st.wait_worker_event("journal_reconciled")
        assert [(e["operation_id"], e["succeeded"]) for e in reconciled] == [(operation_id, False)]

    with hoststore.acquire(store, "e2e-host") as session:
        # Each claim's record: the attempt and its route, owner and claim (``claim_of``).
        states = {record.id.rsplit("/", 1)[0]: record.state for record in session.records()}
    assert states == {
        f"{operation_id}/1/local/{ALICE}": hoststore.State.FAILED_RECOVERED,
        f"{operation_id}/2/local/{ALICE}": hoststore.State.SUCCEEDED,
    }


def test_a_second_worker_on_the_same_host_store_refuses_to_start(
    sqlite_url: str, tmp_path: Path
) -> None:
    store = tmp_path / "host-store"
    store.mkdir(mode=0o700)
    with ai_stack(
        sqlite_url, dev_model=True, OPS_HOST_STORE_DIR=str(store), OPS_HOST_ID="e2e-host"
    ) as st:
        second = st.start_worker()
        assert second.wait(20) != 0
        assert any("another AI worker holds the host store" in line for line in st.logs.lines)
        assert st.stack.children["ai-worker"].poll() is None  # the first one keeps working


def test_invalid_model_output_is_retried_then_failed(sqlite_url: str) -> None:
    model = ModelServer(fail_mode="invalid_json")
    try:
        with ai_stack(sqlite_url, OPS_AI_LOCAL_URL=model.url) as st:
            st.entitle(ALICE)
            operation_id = st.admit(ALICE, CV_REVIEW, st.create_cv(ALICE))
            final = st.wait_state(ALICE, operation_id, FAILED, timeout=45)

            assert final.attempt == final.max_attempts == 3
            assert model.completions == 3
            row = st.row(operation_id)
            assert row.failure_code == "invalid_model_output"
            assert (row.model, row.route) == ("dev-heuristic", "local")  # provenance on failure
            _assert_failed_once_without_note(st, ALICE, operation_id)
    finally:
        model.stop()


def test_local_route_down_falls_back_only_where_permitted(sqlite_url: str) -> None:
    external = ModelServer()
    open_owner, private_owner = "olivia", "paul"
    try:
        with ai_stack(
            sqlite_url,
            OPS_AI_LOCAL_URL=closed_port_url(),
            OPS_AI_EXTERNAL_URL=external.url,
            OPS_AI_EXTERNAL_MODEL="dev-heuristic",
            # A local-only attempt asks again until the circuit opens and waits for its
            # trial (inference.router): a short cooldown keeps the outage that never ends
            # about as short as the retries.
            OPS_AI_CIRCUIT_COOLDOWN_SECONDS="2",
        ) as st:
            st.entitle(open_owner, privacy="external_allowed")
            st.entitle(private_owner, privacy="local_only")
            review = st.admit(open_owner, CV_REVIEW, st.create_cv(open_owner))
            snapshot = st.admit(open_owner, STRATEGY, st.create_job(open_owner))
            private = st.admit(private_owner, CV_REVIEW, st.create_cv(private_owner))

            fallen_back = st.wait_state(open_owner, review, SUCCEEDED, timeout=20)
            assert fallen_back.attempt == 1  # the external claim continued the local attempt
            assert st.row(review).route == "external"
            assert st.count_notes(review) == 1
            for owner, operation_id in ((open_owner, snapshot), (private_owner, private)):
                final = st.wait_state(owner, operation_id, FAILED, timeout=60)
                assert final.attempt == 3
                row = st.row(operation_id)
                assert row.route == "local"
                assert row.failure_code in {"model_connection_error", "circuit_open"}
                _assert_failed_once_without_note(st, owner, operation_id)

            fallbacks = st.logs.events("operations", "operation_fallback")
            assert {event["operation_id"] for event in fallbacks} == {review}
            assert external.completions == 1  # nothing but the permitted review left the host
    finally:
        external.stop()


def test_sigint_mid_analysis_hands_it_back_and_the_restarted_worker_takes_it_at_once(
    any_db_url: str, slow_model: ModelServer
) -> None:
    """Ctrl-C while an inference runs: the worker gives it a short grace, cancels it and
    releases its lease (queued, the attempt not spent, nothing killed); the next worker
    claims it on its first claim and it succeeds as attempt 1 of its budget."""
    with ai_stack(any_db_url, OPS_AI_LOCAL_URL=slow_model.url) as st:
        st.entitle(ALICE)
        operation_id = st.admit(ALICE, STRATEGY, st.create_job(ALICE))
        wait_for(lambda: slow_model.completions == 1, timeout=10, what="the inference")
        worker = st.stack.children["ai-worker"]
        worker.send_signal(signal.SIGINT)
        assert worker.wait(15) == 0

        handed_back = st.get(ALICE, operation_id)
        assert (handed_back.state, handed_back.attempt) == (QUEUED, 0)
        row = st.row(operation_id)
        assert (row.failure_code, row.lease_expires_at) == (None, None)
        assert st.count_notifications(operation_id) == 0
        assert [e["operation_id"] for e in st.worker_events("attempt_released")] == [operation_id]

        slow_model.config.delay_seconds = 0
        st.stack.restart("ai-worker")
        final = st.wait_state(ALICE, operation_id, SUCCEEDED, timeout=30)
        assert final.attempt == 1
        # Queued with no lease (above), so the restarted worker's first claim took it.
        assert st.wait_worker_event("operation_taken", count=2)[1]["operation_id"] == operation_id
        of_it = OperationAttempt.operation_id == operation_id
        history = stored.rows(st.db, select(OperationAttempt).where(of_it))
        outcomes = sorted((a.started_at, a.attempt, a.outcome) for a in history)
        assert [(number, outcome) for _, number, outcome in outcomes] == [
            (1, "released"),
            (1, "succeeded"),
        ]


def test_disabled_worker_idles_and_a_revoked_plan_fails_for_good(sqlite_url: str) -> None:
    with ai_stack(sqlite_url, dev_model=True, OPS_WORKERS_AI_OPERATIONS_ENABLED="false") as st:
        st.entitle(ALICE)
        operation_id = st.admit(ALICE, STRATEGY, st.create_job(ALICE))
        time.sleep(1.5)  # fifteen poll intervals
        untouched = st.get(ALICE, operation_id)
        assert (untouched.state, untouched.attempt) == (QUEUED, 0)
        [idle] = st.worker_events("ai_worker_idle")
        assert "OPS_WORKERS_AI_OPERATIONS_ENABLED" in idle["reason"]
        idle_worker = st.stack.children["ai-worker"]
        idle_worker.send_signal(signal.SIGTERM)
        assert idle_worker.wait(5) == 0

        st.revoke(ALICE)
        st.start_worker(OPS_WORKERS_AI_OPERATIONS_ENABLED="true")
        # The new worker's start is part of this wait: a loaded machine takes seconds.
        final = st.wait_state(ALICE, operation_id, FAILED, timeout=45)
        assert final.attempt == 1  # permanent: no retry
        assert st.row(operation_id).failure_code == "not_entitled"
        _assert_failed_once_without_note(st, ALICE, operation_id)
