"""SPEC §3 and §4 through the real Operations and Notifications gRPC services.

Both engines; time moves only by ``ManualClock.advance`` and leases expire only
when the test calls ``services.sweep()``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import grpc
import pytest
from sqlalchemy import func, select

from durable_ops.api.notifications.v1 import notifications_pb2 as npb
from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.model import lifecycle
from durable_ops.model.lifecycle import Decision, Event
from durable_ops.storage import operations
from durable_ops.storage.db import Database
from durable_ops.storage.schema import UserNotification, UserOperation
from durable_ops.storage.tx import Tx
from tests.support.clock import ManualClock
from tests.support.grpc_services import Services, running_services
from tests.support.operations_client import (
    ALICE,
    BOB,
    CANCELLED,
    FAILED,
    OTHER_TASK,
    QUEUED,
    RUNNING,
    SUCCEEDED,
    TASK,
    WAITING_FOR_RETRY,
    OpsClient,
    expect_failure,
    later,
    timestamp,
)
from tests.support.stored import scalar

INVALID = grpc.StatusCode.INVALID_ARGUMENT
ABORTED = grpc.StatusCode.ABORTED
PRECONDITION = grpc.StatusCode.FAILED_PRECONDITION
NOT_FOUND = grpc.StatusCode.NOT_FOUND
T = TypeVar("T")


@pytest.fixture
def services(db_url: str) -> Iterator[Services]:
    with running_services(db_url, ManualClock()) as running:
        yield running


def _advance(services: Services, seconds: float) -> None:
    clock = services.clock
    assert isinstance(clock, ManualClock)
    clock.advance(seconds)


def _outcomes(ops: OpsClient, operation_id: str) -> list[str]:
    return [row.outcome for row in ops.notification_rows(operation_id)]


# ---- lease expiry, retries, stale workers ---------------------------------------------------


def test_expiring_leases_retry_until_max_attempts_then_fail_with_one_notification(
    services: Services, ops: OpsClient
) -> None:
    created = ops.create(ALICE, "k-expire", max_attempts=3, retry_delay_seconds=2)
    for attempt in (1, 2, 3):
        lease = ops.claim_one(lease_seconds=5)
        assert (lease.id, lease.operation.attempt) == (created.id, attempt)
        assert lease.operation.state == RUNNING
        assert ops.claim() is None  # one running attempt at a time
        _advance(services, 4.9)
        assert services.sweep().expired_leases == 0  # not yet expired
        _advance(services, 0.2)
        report = services.sweep()
        assert (report.expired_leases, report.promoted) == (1, 0)
        current = ops.get(ALICE, created.id)
        if attempt < 3:
            assert current.state == WAITING_FOR_RETRY
            assert current.attempt == attempt
            assert _outcomes(ops, created.id) == []
            assert ops.claim() is None  # not due yet
            # Jittered (ADR 15): between the retry delay and twice the un-jittered step.
            wait = current.next_attempt_at.ToDatetime() - services.clock().replace(tzinfo=None)
            assert timedelta(seconds=2) <= wait <= timedelta(seconds=2 * 2**attempt)
            _advance(services, wait.total_seconds() - 0.5)
            assert services.sweep().promoted == 0
            _advance(services, 0.5)
            assert services.sweep().promoted == 1
            assert ops.get(ALICE, created.id).state == QUEUED
    final = ops.get(ALICE, created.id)
    assert (final.state, final.attempt) == (FAILED, 3)
    assert final.HasField("finished_at")
    assert _outcomes(ops, created.id) == ["failed"]
    assert ops.row(created.id).failure_code == "lease_expired"
    assert services.sweep().total == 0  # nothing left to do, no second notification
    assert _outcomes(ops, created.id) == ["failed"]
    assert ops.unread(ALICE) == 1


def test_stale_worker_is_refused_and_the_new_lease_works(
    services: Services, ops: OpsClient
) -> None:
    created = ops.create(ALICE, "k-stale", retry_delay_seconds=1)
    stale = ops.claim_one(lease_seconds=5)
    assert ops.heartbeat_once(stale, lease_seconds=5).cancel_requested is False
    _advance(services, 5.5)  # the lease ran out; nobody swept yet
    expect_failure(lambda: ops.heartbeat_once(stale), ABORTED, "lease_lost")
    expect_failure(lambda: ops.complete(stale), ABORTED, "lease_lost")
    assert ops.get(ALICE, created.id).state == RUNNING

    assert services.sweep().expired_leases == 1
    expect_failure(lambda: ops.complete(stale), ABORTED, "lease_lost")
    _advance(services, 2)  # the first retry waits 1 s to 2 s (jittered, ADR 15)
    assert services.sweep().promoted == 1
    fresh = ops.claim_one()
    assert (fresh.id, fresh.operation.attempt) == (created.id, 2)
    assert fresh.token != stale.token

    expect_failure(lambda: ops.heartbeat_once(stale), ABORTED, "lease_lost")
    expect_failure(lambda: ops.complete(stale), ABORTED, "lease_lost")
    expect_failure(lambda: ops.fail(stale, retryable=False), ABORTED, "lease_lost")
    assert ops.heartbeat_once(fresh, progress=40).cancel_requested is False
    assert ops.get(ALICE, created.id).progress_percent == 40
    assert ops.complete(fresh) == SUCCEEDED
    expect_failure(lambda: ops.complete(stale), ABORTED, "lease_lost")
    done = ops.get(ALICE, created.id)
    assert (done.state, done.attempt, done.progress_percent) == (SUCCEEDED, 2, 100)
    assert _outcomes(ops, created.id) == ["succeeded"]


# ---- cancellation -----------------------------------------------------------------------------


def test_cancel_queued_is_immediate_with_one_notification(
    services: Services, ops: OpsClient
) -> None:
    created = ops.create(ALICE, "k-cancel-queued")
    cancelled = ops.cancel(ALICE, created.id)
    assert cancelled.state == CANCELLED
    assert cancelled.HasField("finished_at")
    assert _outcomes(ops, created.id) == ["cancelled"]
    assert ops.cancel(ALICE, created.id).state == CANCELLED  # an exact duplicate: no error
    assert _outcomes(ops, created.id) == ["cancelled"]
    assert ops.claim() is None


def test_cancel_waiting_for_retry_is_immediate(services: Services, ops: OpsClient) -> None:
    created = ops.create(ALICE, "k-cancel-waiting")
    lease = ops.claim_one()
    assert ops.fail(lease, retryable=True) == WAITING_FOR_RETRY
    assert _outcomes(ops, created.id) == []
    assert ops.cancel(ALICE, created.id).state == CANCELLED
    assert _outcomes(ops, created.id) == ["cancelled"]
    _advance(services, 3600)
    assert services.sweep().total == 0
    assert ops.get(ALICE, created.id).state == CANCELLED


def test_cancel_running_is_cooperative(services: Services, ops: OpsClient) -> None:
    created = ops.create(ALICE, "k-cancel-running")
    lease = ops.claim_one()
    stream = ops.stream(lease)
    assert stream.beat(progress=10).cancel_requested is False
    expect_failure(lambda: ops.acknowledge_cancel(lease), PRECONDITION, "invalid_state")

    requested = ops.cancel(ALICE, created.id)
    assert (requested.state, requested.cancel_requested) == (RUNNING, True)
    pushed = stream.read()  # the service speaks first: no beat asked
    assert (pushed.pushed, pushed.cancel_requested) == (True, True)
    assert _outcomes(ops, created.id) == []
    assert ops.cancel(ALICE, created.id).state == RUNNING  # asking twice changes nothing

    answer = stream.beat(progress=20)
    assert (answer.pushed, answer.cancel_requested) == (False, True)
    assert stream.pushed == []  # pushed once only
    assert answer.lease_expires_at.ToDatetime() > services.clock().replace(tzinfo=None)
    stream.close()
    assert ops.acknowledge_cancel(lease) == CANCELLED
    assert ops.acknowledge_cancel(lease) == CANCELLED  # exact duplicate
    done = ops.get(ALICE, created.id)
    assert (done.state, done.progress_percent) == (CANCELLED, 20)
    assert _outcomes(ops, created.id) == ["cancelled"]


def test_a_worker_failing_after_cancel_was_requested_ends_cancelled(
    services: Services, ops: OpsClient
) -> None:
    created = ops.create(ALICE, "k-cancel-then-fail", max_attempts=5)
    lease = ops.claim_one()
    ops.cancel(ALICE, created.id)
    assert ops.fail(lease, retryable=True, code="stopped") == CANCELLED  # never retried
    assert _outcomes(ops, created.id) == ["cancelled"]
    _advance(services, 3600)
    assert services.sweep().total == 0
    assert ops.claim() is None


def test_running_with_cancel_requested_and_expired_lease_is_swept_to_cancelled(
    services: Services, ops: OpsClient
) -> None:
    created = ops.create(ALICE, "k-cancel-swept", max_attempts=5)
    ops.claim_one(lease_seconds=5)
    ops.cancel(ALICE, created.id)
    _advance(services, 6)
    assert services.sweep().expired_leases == 1
    assert ops.get(ALICE, created.id).state == CANCELLED
    assert _outcomes(ops, created.id) == ["cancelled"]
    assert services.sweep().total == 0
    assert _outcomes(ops, created.id) == ["cancelled"]


# ---- deadlines ---------------------------------------------------------------------------------


def test_passed_deadline_fails_closed_and_is_never_claimed(
    services: Services, ops: OpsClient
) -> None:
    doomed = ops.create(ALICE, "k-deadline", priority=100, deadline=later(services, 3))
    plain = ops.create(ALICE, "k-no-deadline", priority=0)
    _advance(services, 3.5)
    lease = ops.claim_one()  # the higher priority one is past its deadline: skipped
    assert lease.id == plain.id
    assert ops.claim() is None
    assert services.sweep().deadlines == 1
    failed = ops.get(ALICE, doomed.id)
    assert (failed.state, failed.attempt) == (FAILED, 0)
    assert ops.row(doomed.id).failure_code == "deadline_exceeded"
    assert _outcomes(ops, doomed.id) == ["failed"]
    assert services.sweep().total == 0
    assert _outcomes(ops, doomed.id) == ["failed"]


def test_waiting_for_retry_past_its_deadline_fails_closed(
    services: Services, ops: OpsClient
) -> None:
    created = ops.create(
        ALICE, "k-deadline-wait", retry_delay_seconds=60, deadline=later(services, 30)
    )
    assert ops.fail(ops.claim_one(), retryable=True) == WAITING_FOR_RETRY
    _advance(services, 61)
    report = services.sweep()
    assert (report.deadlines, report.promoted) == (1, 0)
    assert ops.get(ALICE, created.id).state == FAILED
    assert _outcomes(ops, created.id) == ["failed"]


# ---- retry, duplicates, terminal ----------------------------------------------------------------


def test_a_failure_the_sweeper_decides_does_not_keep_an_earlier_attempts_message(
    services: Services, ops: OpsClient
) -> None:
    """An operator's ``show`` read ``lease_expired`` beside "local model route unavailable":
    the code was the sweeper's, the message the attempt before's, which explains another
    failure. The sweeper's own failures carry no message; the attempts keep theirs."""
    expired = ops.create(ALICE, "k-expired-after-error", retry_delay_seconds=1)
    assert ops.fail(ops.claim_one(), retryable=True, message="the model said no") == (
        WAITING_FOR_RETRY
    )
    _advance(services, 2.1)  # past the jittered retry delay
    assert services.sweep().promoted == 1
    ops.claim_one(lease_seconds=5)
    _advance(services, 5.1)
    assert services.sweep().expired_leases == 1
    assert (ops.row(expired.id).failure_code, ops.row(expired.id).failure_message) == (
        "lease_expired",
        None,
    )

    doomed = ops.create(
        ALICE, "k-deadline-after-error", retry_delay_seconds=60, deadline=later(services, 30)
    )
    ops.fail(ops.claim_one(), retryable=True, message="the model said no")
    _advance(services, 31)
    assert services.sweep().deadlines == 1
    assert (ops.row(doomed.id).failure_code, ops.row(doomed.id).failure_message) == (
        "deadline_exceeded",
        None,
    )


def test_retry_failed_and_cancelled_requeues_with_a_fresh_budget(
    services: Services, ops: OpsClient
) -> None:
    failed = ops.create(ALICE, "k-retry-failed", max_attempts=1)
    assert ops.fail(ops.claim_one(), retryable=True) == FAILED  # no attempts left
    _advance(services, 0.001)
    cancelled = ops.create(ALICE, "k-retry-cancelled")
    ops.cancel(ALICE, cancelled.id)
    assert ops.unread(ALICE) == 2

    for operation_id, outcome in ((failed.id, "failed"), (cancelled.id, "cancelled")):
        assert _outcomes(ops, operation_id) == [outcome]
        requeued = ops.retry(ALICE, operation_id)
        assert (requeued.state, requeued.attempt, requeued.cancel_requested) == (QUEUED, 0, False)
        assert not requeued.HasField("finished_at")
        assert _outcomes(ops, operation_id) == []
    assert ops.unread(ALICE) == 0
    assert ops.all_notifications(ALICE) == []
    row = ops.row(failed.id)
    assert (row.failure_code, row.lease_token_hash) == (None, None)

    lease = ops.claim_one()
    assert (lease.id, lease.operation.attempt) == (failed.id, 1)  # created first, same priority
    assert ops.complete(lease) == SUCCEEDED
    assert _outcomes(ops, failed.id) == ["succeeded"]


def test_retry_from_non_terminal_or_succeeded_is_refused(
    services: Services, ops: OpsClient
) -> None:
    succeeded = ops.create(ALICE, "k-r-succeeded", priority=2)
    running = ops.create(ALICE, "k-r-running", priority=1)
    queued = ops.create(ALICE, "k-r-queued", priority=0)
    first = ops.claim_one()
    assert first.id == succeeded.id
    assert ops.complete(first) == SUCCEEDED
    assert ops.claim_one().id == running.id
    expected = {succeeded.id: SUCCEEDED, running.id: RUNNING, queued.id: QUEUED}
    for operation_id, state in expected.items():
        expect_failure(
            lambda oid=operation_id: ops.retry(ALICE, oid),  # type: ignore[misc]
            PRECONDITION,
            "not_retryable",
        )
        assert ops.get(ALICE, operation_id).state == state
    assert ops.notifications_per_operation() == {succeeded.id: 1}


def test_duplicate_completion_is_ok_without_a_second_notification(
    services: Services, ops: OpsClient
) -> None:
    created = ops.create(ALICE, "k-dup")
    lease = ops.claim_one()
    assert ops.complete(lease) == SUCCEEDED
    _advance(services, 120)  # even after the lease would have run out
    assert ops.complete(lease) == SUCCEEDED
    assert _outcomes(ops, created.id) == ["succeeded"]
    assert ops.notifications_per_operation() == {created.id: 1}
    expect_failure(lambda: ops.complete(lease, token=lease.token + "x"), ABORTED, "lease_lost")
    expect_failure(lambda: ops.cancel(ALICE, created.id), PRECONDITION, "already_terminal")
    expect_failure(lambda: ops.heartbeat_once(lease), ABORTED, "lease_lost")
    assert ops.get(ALICE, created.id).state == SUCCEEDED


def test_fail_retryable_and_permanent_store_provenance_and_show_only_the_model(
    services: Services, ops: OpsClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lifecycle, "RETRY_JITTER", lambda: 0.0)  # the least jittered wait
    message = "upstream said: prompt contained SECRET-CV-TEXT"
    provenance = pb.Provenance(provider="acme.example", model="large-2", route="external")
    created = ops.create(ALICE, "k-fail", max_attempts=3, retry_delay_seconds=10)
    first = ops.claim_one()
    assert ops.fail(first, retryable=True, code="timeout", message=message) == WAITING_FOR_RETRY
    waiting = ops.get(ALICE, created.id)
    assert waiting.state == WAITING_FOR_RETRY
    assert waiting.failure_code == ""  # the owner reads a code only once it failed for good
    assert waiting.next_attempt_at.ToDatetime() == (
        services.clock() + timedelta(seconds=10)
    ).replace(tzinfo=None)
    assert _outcomes(ops, created.id) == []

    _advance(services, 10)
    assert services.sweep().promoted == 1
    second = ops.claim_one()
    assert second.operation.attempt == 2
    state = ops.fail(
        second, retryable=False, code="refused", message=message, provenance=provenance
    )
    assert state == FAILED
    assert ops.fail(second, retryable=False, code="refused") == FAILED  # duplicate: no change
    assert _outcomes(ops, created.id) == ["failed"]

    row = ops.row(created.id)
    assert (row.state, row.attempt, row.failure_code, row.failure_message) == (
        "failed",
        2,
        "refused",
        message,
    )
    assert (row.provider, row.model, row.route) == ("acme.example", "large-2", "external")

    hidden = {
        "provider",
        "model",
        "route",
        "idempotency_key",
        "failure_message",
        "lease_token",
        "lease_token_hash",
        "lease_expires_at",
        "owner_user_id",
    }
    fields = set(pb.Operation.DESCRIPTOR.fields_by_name)
    assert fields & hidden == set()
    assert not any(name.startswith(("lease", "provenance")) for name in fields)
    assert {name for name in fields if name.startswith("failure")} == {"failure_code"}
    shown = ops.get(ALICE, created.id)
    assert shown.failure_code == "refused"  # the stable code, never the message
    for value in (message, "acme", "k-fail"):  # the provider is an address
        assert value not in str(shown)
        assert value.encode() not in shown.SerializeToString()
    # Results say which model made them (SPEC): the model and its route, nothing else.
    assert shown.produced_by == pb.Provenance(model="large-2", route="external")


# ---- notifications API -------------------------------------------------------------------------


def _finish(ops: OpsClient, services: Services, owner: str, key: str) -> str:
    created = ops.create(owner, key)
    lease = ops.claim_one()
    assert lease.id == created.id
    ops.complete(lease)
    _advance(services, 1)  # distinct created_at: newest first is unambiguous
    return created.id


def test_notifications_list_page_read_dismiss_and_count(services: Services, ops: OpsClient) -> None:
    ids = [_finish(ops, services, ALICE, f"k-note-{i}") for i in range(5)]
    bobs = _finish(ops, services, BOB, "k-note-bob")
    newest_first = list(reversed(ids))

    first = ops.notifications_page(ALICE, page_size=2)
    second = ops.notifications_page(ALICE, page_size=2, page_token=first.next_page_token)
    third = ops.notifications_page(ALICE, page_size=2, page_token=second.next_page_token)
    pages = [first, second, third]
    assert [[n.operation_id for n in page.notifications] for page in pages] == [
        newest_first[0:2],
        newest_first[2:4],
        newest_first[4:5],
    ]
    assert first.next_page_token
    assert second.next_page_token
    assert third.next_page_token == ""
    assert all(
        (n.outcome, n.task_type, n.title) == ("succeeded", TASK, "Strategy snapshot is ready")
        for page in pages
        for n in page.notifications
    )
    assert all(not n.HasField("read_at") for n in first.notifications)
    assert ops.unread(ALICE) == 5
    assert ops.unread(BOB) == 1

    by_operation = {n.operation_id: n for n in ops.all_notifications(ALICE)}
    read = ops.notices.MarkRead(
        npb.MarkReadRequest(notification_id=by_operation[ids[0]].id), metadata=ops.gateway(ALICE)
    )
    assert read.HasField("read_at")
    again = ops.notices.MarkRead(
        npb.MarkReadRequest(notification_id=by_operation[ids[0]].id), metadata=ops.gateway(ALICE)
    )
    assert again.read_at == read.read_at  # reading twice keeps the first time
    assert ops.unread(ALICE) == 4

    dismissed = ops.notices.Dismiss(
        npb.DismissRequest(notification_id=by_operation[ids[1]].id), metadata=ops.gateway(ALICE)
    )
    assert dismissed.operation_id == ids[1]
    assert ops.unread(ALICE) == 3
    listed = [n.operation_id for n in ops.all_notifications(ALICE)]
    assert listed == [i for i in newest_first if i != ids[1]]
    expect_failure(
        lambda: ops.notices.MarkRead(
            npb.MarkReadRequest(notification_id=dismissed.id), metadata=ops.gateway(ALICE)
        ),
        NOT_FOUND,
    )

    marked = ops.notices.MarkAllRead(npb.MarkAllReadRequest(), metadata=ops.gateway(ALICE))
    assert marked.marked == 3
    assert ops.unread(ALICE) == 0
    assert all(n.HasField("read_at") for n in ops.all_notifications(ALICE))
    assert ops.unread(BOB) == 1  # another owner's are untouched

    bob_note = ops.all_notifications(BOB)[0]
    assert bob_note.operation_id == bobs
    for call in (
        lambda: ops.notices.MarkRead(
            npb.MarkReadRequest(notification_id=bob_note.id), metadata=ops.gateway(ALICE)
        ),
        lambda: ops.notices.Dismiss(
            npb.DismissRequest(notification_id=bob_note.id), metadata=ops.gateway(ALICE)
        ),
    ):
        theirs = expect_failure(call, NOT_FOUND, "notification_not_found")
        missing = expect_failure(
            lambda: ops.notices.MarkRead(
                npb.MarkReadRequest(notification_id="f" * 32), metadata=ops.gateway(ALICE)
            ),
            NOT_FOUND,
        )
        assert theirs == missing
    assert ops.unread(BOB) == 1
    assert not ops.all_notifications(BOB)[0].HasField("read_at")
    expect_failure(lambda: ops.notifications_page(ALICE, page_size=101), INVALID, field="page_size")
    expect_failure(
        lambda: ops.notifications_page(ALICE, page_token="garbage!"), INVALID, field="page_token"
    )


def test_notification_text_never_carries_subject_or_failure(
    services: Services, ops: OpsClient
) -> None:
    subject = "subj-7f3a-DISTINCTIVE"
    secret = "stack trace mentioning DISTINCTIVE-FAILURE-42"
    succeeded = ops.create(ALICE, "k-text-1", subject_id=subject)
    ops.complete(ops.claim_one())
    failed = ops.create(ALICE, "k-text-2", subject_id=subject, task_type=OTHER_TASK)
    ops.fail(ops.claim_one((OTHER_TASK,)), retryable=False, code="bad_input", message=secret)
    cancelled = ops.create(ALICE, "k-text-3", subject_id=subject, task_type="custom.task")
    ops.cancel(ALICE, cancelled.id)

    notes = {n.operation_id: n for n in ops.all_notifications(ALICE)}
    assert {operation_id: n.outcome for operation_id, n in notes.items()} == {
        succeeded.id: "succeeded",
        failed.id: "failed",
        cancelled.id: "cancelled",
    }
    assert notes[failed.id].title == "CV review could not be completed"
    assert notes[cancelled.id].title == "Operation was cancelled"
    for note in notes.values():
        for text in (note.title, note.body):
            assert text
            for leaked in (subject, "DISTINCTIVE", secret, "bad_input", "k-text"):
                assert leaked not in text


# ---- listing operations --------------------------------------------------------------------------


def test_list_operations_filters_and_pages(services: Services, ops: OpsClient) -> None:
    snapshot_ids = []
    for i in range(7):
        snapshot_ids.append(ops.create(ALICE, f"k-list-{i}").id)
        _advance(services, 0.001)
    review_ids = [
        ops.create(ALICE, f"k-list-review-{i}", task_type=OTHER_TASK).id for i in range(3)
    ]
    ops.create(BOB, "k-list-bob")
    ops.cancel(ALICE, snapshot_ids[2])
    ops.cancel(ALICE, review_ids[0])

    seen: list[str] = []
    token = ""
    pages = 0
    while True:
        page = ops.list_page(ALICE, page_size=3, page_token=token)
        pages += 1
        assert len(page.operations) == (3 if page.next_page_token else 1)
        seen.extend(op.id for op in page.operations)
        token = page.next_page_token
        if not token:
            break
    assert pages == 4
    # the three reviews share one created_at: ties are ordered by id, never lost or repeated
    assert seen == sorted(review_ids, reverse=True) + list(reversed(snapshot_ids))

    cancelled = ops.list_page(ALICE, state=CANCELLED)
    assert {op.id for op in cancelled.operations} == {snapshot_ids[2], review_ids[0]}
    assert cancelled.next_page_token == ""
    reviews = ops.list_page(ALICE, task_type=OTHER_TASK)
    assert {op.id for op in reviews.operations} == set(review_ids)
    queued_snapshots = ops.list_page(ALICE, state=QUEUED, task_type=TASK, page_size=4)
    expected = [i for i in reversed(snapshot_ids) if i != snapshot_ids[2]]
    assert [op.id for op in queued_snapshots.operations] == expected[:4]
    rest = ops.list_page(
        ALICE,
        state=QUEUED,
        task_type=TASK,
        page_size=4,
        page_token=queued_snapshots.next_page_token,
    )
    assert [op.id for op in rest.operations] == expected[4:]
    assert rest.next_page_token == ""
    assert ops.list_page(ALICE, state=SUCCEEDED).operations == []
    assert len(ops.list_page(BOB).operations) == 1

    expect_failure(
        lambda: ops.list_page(ALICE, page_token="not-a-token"), INVALID, field="page_token"
    )
    expect_failure(
        lambda: ops.list_page(ALICE, page_token="eyJjIjogMX0"), INVALID, field="page_token"
    )
    expect_failure(lambda: ops.list_page(ALICE, page_size=101), INVALID, field="page_size")
    expect_failure(lambda: ops.list_page(ALICE, page_size=-1), INVALID, field="page_size")
    expect_failure(lambda: ops.list_page(ALICE, task_type="Bad Type"), INVALID, field="task_type")
    assert len(ops.list_page(ALICE, page_size=100).operations) == 10


# ---- bounds --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"task_type": "t" * 65}, "task_type"),
        ({"task_type": "Strategy.Snapshot"}, "task_type"),
        ({"key": "k" * 129}, "idempotency_key"),
        ({"subject_id": "s" * 65}, "subject_id"),
        ({"subject_type": "j" * 33}, "subject_type"),
        ({"max_attempts": 11}, "max_attempts"),
        ({"max_attempts": -1}, "max_attempts"),
        ({"retry_delay_seconds": 3601}, "retry_delay_seconds"),
        ({"deadline_hours": 25}, "deadline"),
        ({"deadline_hours": -1}, "deadline"),
    ],
)
def test_out_of_bounds_creates_are_refused(
    services: Services, ops: OpsClient, fields: dict[str, object], field: str
) -> None:
    arguments = dict(fields)
    key = str(arguments.pop("key", "k-bounds"))
    hours = arguments.pop("deadline_hours", None)
    if isinstance(hours, int):
        arguments["deadline"] = later(services, hours * 3600)
    request = ops.create_request(key, **arguments)  # type: ignore[arg-type]
    failure = expect_failure(
        lambda: ops.create_raw(ALICE, request), INVALID, "invalid_argument", field=field
    )
    assert failure.details.startswith(f"{field}: ")
    assert ops.state_counts() == {}


def test_limits_themselves_are_accepted(services: Services, ops: OpsClient) -> None:
    request = ops.create_request(
        "k" * 128,
        task_type="t" * 64,
        subject_type="j" * 32,
        subject_id="s" * 64,
        max_attempts=10,
        retry_delay_seconds=3600,
        deadline=later(services, 24 * 3600),
    )
    assert ops.create_raw(ALICE, request).created
    lease = ops.claim_one(("t" * 64,), lease_seconds=600)
    ops.heartbeat_once(lease, progress=100, lease_seconds=5)
    assert ops.fail(lease, retryable=False, code="c" * 64, message="m" * 512) == FAILED


@pytest.mark.parametrize(
    ("seconds", "nanos"),
    [(2**40, 0), (-(2**40), 0), (253_402_300_800, 0), (0, -1), (0, 1_000_000_000)],
)
def test_a_deadline_that_is_no_valid_timestamp_is_refused(
    services: Services, ops: OpsClient, seconds: int, nanos: int
) -> None:
    request = ops.create_request("k-bad-deadline")
    request.deadline.seconds = seconds
    request.deadline.nanos = nanos
    expect_failure(lambda: ops.create_raw(ALICE, request), INVALID, field="deadline")
    assert ops.state_counts() == {}


def _page_token(created_at: str, row_id: str = "f" * 32) -> str:
    raw = json.dumps({"c": created_at, "i": row_id}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@pytest.mark.parametrize("created_at", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"])
def test_a_page_token_outside_the_datetime_range_is_invalid_not_internal(
    services: Services, ops: OpsClient, created_at: str
) -> None:
    ops.create(ALICE, "k-token-range")
    token = _page_token(created_at)
    expect_failure(lambda: ops.list_page(ALICE, page_token=token), INVALID, field="page_token")
    expect_failure(
        lambda: ops.notifications_page(ALICE, page_token=token), INVALID, field="page_token"
    )


def test_claim_order_is_priority_then_age_and_only_the_asked_task_types(
    services: Services, ops: OpsClient
) -> None:
    low = ops.create(ALICE, "k-order-low", priority=-5)
    _advance(services, 0.001)
    old_high = ops.create(BOB, "k-order-old-high", priority=10)
    _advance(services, 0.001)
    review = ops.create(ALICE, "k-order-review", priority=1000, task_type=OTHER_TASK)
    _advance(services, 0.001)
    new_high = ops.create(ALICE, "k-order-new-high", priority=10)
    _advance(services, 0.001)
    middle = ops.create(BOB, "k-order-middle", priority=0)
    claimed = [ops.claim_one() for _ in range(4)]
    assert [(lease.id, lease.owner) for lease in claimed] == [
        (old_high.id, BOB),
        (new_high.id, ALICE),
        (middle.id, BOB),
        (low.id, ALICE),
    ]
    assert ops.claim() is None
    assert ops.get(ALICE, review.id).state == QUEUED
    assert ops.claim_one((TASK, OTHER_TASK)).id == review.id


def test_out_of_bounds_worker_calls_are_refused(services: Services, ops: OpsClient) -> None:
    created = ops.create(ALICE, "k-worker-bounds")
    expect_failure(lambda: ops.claim(lease_seconds=4), INVALID, field="lease_seconds")
    expect_failure(lambda: ops.claim(lease_seconds=601), INVALID, field="lease_seconds")
    expect_failure(lambda: ops.claim(("Nope",)), INVALID, field="task_type")
    assert ops.get(ALICE, created.id).state == QUEUED  # nothing was claimed by a refused call

    lease = ops.claim_one()
    expect_failure(
        lambda: ops.heartbeat_once(lease, progress=101), INVALID, field="progress_percent"
    )
    expect_failure(
        lambda: ops.heartbeat_once(lease, progress=-1), INVALID, field="progress_percent"
    )
    expect_failure(
        lambda: ops.heartbeat_once(lease, lease_seconds=601), INVALID, field="lease_seconds"
    )
    expect_failure(
        lambda: ops.fail(lease, retryable=False, message="m" * 513),
        INVALID,
        field="failure_message",
    )
    expect_failure(
        lambda: ops.fail(lease, retryable=False, code="c" * 65), INVALID, field="failure_code"
    )
    expect_failure(
        lambda: ops.complete(lease, provenance=pb.Provenance(route="r" * 17)),
        INVALID,
        field="route",
    )
    expect_failure(
        lambda: ops.complete(lease, provenance=pb.Provenance(provider="p" * 33)),
        INVALID,
        field="provider",
    )
    unchanged = ops.get(ALICE, created.id)
    assert (unchanged.state, unchanged.progress_percent) == (RUNNING, 0)
    assert ops.notifications_per_operation() == {}


def test_deadline_timestamp_is_reported_back(services: Services, ops: OpsClient) -> None:
    deadline = later(services, 600)
    created = ops.create(ALICE, "k-deadline-echo", deadline=deadline)
    assert created.deadline_at == timestamp(deadline)


# ---- storage's fast paths write what the model decides -------------------------------------------


def _written(op: UserOperation) -> tuple[Any, ...]:
    return (op.state, op.attempt, op.cancel_requested, op.next_attempt_at)


def _decided(decision: Decision) -> tuple[Any, ...]:
    return (decision.state, decision.attempt, decision.cancel_requested, decision.next_attempt_at)


def test_the_fast_paths_write_what_the_model_decides(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Create, claim, requeue, fallback claim and completion skip ``decide``: their rows
    must still be what ``decide`` answers on the facts they were applied to."""
    monkeypatch.setattr(lifecycle, "RETRY_JITTER", lambda: 0.0)  # the retry is due at its delay

    def owned(work: Callable[[Tx], T]) -> T:
        return database.run(work, owner_id=ALICE)

    def neutral(work: Callable[[Tx], T]) -> T:
        return database.run(work, owner_id=None)

    def row(operation_id: str) -> UserOperation:
        return owned(lambda tx: operations.get(tx, operation_id))

    def notifications_of(operation_id: str) -> int:
        of_it = UserNotification.operation_id == operation_id
        return int(scalar(database, select(func.count()).where(of_it)) or 0)

    def claimed(operation_id: str, at: datetime, event: Event) -> str:
        before = row(operation_id)
        external = event is Event.CLAIM_EXTERNAL
        (claim,) = neutral(lambda tx: operations.claim(tx, [TASK], 30, at, external_route=external))
        decision = lifecycle.decide(operations.facts(before), event, at)
        assert _written(row(operation_id)) == _written(claim.operation) == _decided(decision)
        return claim.lease_token

    def settled(operation_id: str, token: str, event: Event, at: datetime) -> str:
        settlement = operations.Settlement("alice", operation_id, token, event)
        return owned(lambda tx: operations.settle_one(tx, settlement, at))

    now = datetime.now(UTC)
    request = operations.CreateRequest(TASK, "k-fast-paths", "job", "j-1", max_attempts=3)
    op, created = owned(lambda tx: operations.create(tx, request, now))
    assert created
    assert _written(row(op.id)) == _written(op) == _decided(lifecycle.CREATED)

    token = claimed(op.id, now, Event.CLAIM)
    failure = operations.Settlement(
        "alice", op.id, token, Event.FAIL_RETRYABLE, failure_code="busy"
    )
    owned(lambda tx: operations.settle_one(tx, failure, now))
    due = now + timedelta(seconds=request.retry_delay_seconds)
    before = row(op.id)
    assert neutral(lambda tx: operations.sweep(tx, due)).promoted == 1
    requeued = lifecycle.decide(operations.facts(before), Event.SWEEP, due)
    assert _written(row(op.id)) == _decided(requeued)

    token = claimed(op.id, due, Event.CLAIM)
    settled(op.id, token, Event.REQUEST_FALLBACK, due)
    token = claimed(op.id, due, Event.CLAIM_EXTERNAL)

    before = row(op.id)
    state = settled(op.id, token, Event.COMPLETE, due)
    completed = lifecycle.decide(operations.facts(before), Event.COMPLETE, due)
    assert state == completed.state
    assert _written(row(op.id)) == _decided(completed)
    assert notifications_of(op.id) == int(completed.notify) == 1


def test_the_owner_sees_which_model_answered_but_not_its_address(ops: OpsClient) -> None:
    ops.create(ALICE, "produced-by")
    lease = ops.claim_one()
    assert not ops.get(ALICE, lease.id).HasField("produced_by")  # nothing answered yet
    ops.complete(
        lease, provenance=pb.Provenance(provider="10.0.0.7", model="gemma-3", route="local")
    )
    done = ops.get(ALICE, lease.id)
    assert done.produced_by == pb.Provenance(model="gemma-3", route="local")
