"""Many workers and many clients at once: exactly-once claims, completions, notifications.

The worker races run real threads against one real server; the database decides
who wins. Idempotent creates race behind a barrier so that they really overlap.
On MariaDB the race of 8 workers over 1,000 operations runs with batched SDK
worker processes and a SIGKILL (``tests/e2e/test_drill_batched_workers.py``).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import grpc
import pytest
from sqlalchemy import func, select

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.storage.schema import UserOperation
from tests.support.clock import ManualClock
from tests.support.grpc_services import Services, running_services
from tests.support.operations_client import (
    ALICE,
    BOB,
    OTHER_TASK,
    OWNER_IDS,
    RUNNING,
    SUCCEEDED,
    TASK,
    OpsClient,
    RpcFailure,
    expect_failure,
    failure_of,
    later,
)
from tests.support.stored import rows, scalar

PRIORITIES = (0, 5, 10)
RACE_BUDGET_SECONDS = 90.0


@dataclass
class RaceLog:
    """What every worker saw, merged under one lock."""

    claims: list[tuple[str, int]] = field(default_factory=list)  # (operation id, attempt)
    completions: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    empty_claims: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def _create_many(ops: OpsClient, count: int, threads: int) -> list[str]:
    def create(index: int) -> str:
        return ops.create(
            OWNER_IDS[index % len(OWNER_IDS)],
            f"bulk-{index}",
            task_type=(TASK, OTHER_TASK)[index % 2],
            subject_id=f"subject-{index}",
            priority=PRIORITIES[index % len(PRIORITIES)],
        ).id

    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(create, range(count)))


def _worker(ops: OpsClient, total: int, log: RaceLog, give_up_at: float) -> None:
    while time.monotonic() < give_up_at:
        try:
            lease = ops.claim((TASK, OTHER_TASK), lease_seconds=60)
        except grpc.RpcError as error:
            with log.lock:
                log.errors.append(f"claim: {failure_of(error)}")
            continue
        if lease is None:
            with log.lock:
                if len(log.completions) >= total:
                    return
                log.empty_claims += 1
            time.sleep(0.002)
            continue
        with log.lock:
            log.claims.append((lease.id, lease.operation.attempt))
        try:
            beat = ops.heartbeat_once(lease, progress=50)
            state = ops.complete(lease)
        except grpc.RpcError as error:
            with log.lock:
                log.errors.append(f"{lease.id}: {failure_of(error)}")
            continue
        with log.lock:
            if beat.cancel_requested or state != SUCCEEDED:
                log.errors.append(f"{lease.id}: cancel={beat.cancel_requested} state={state}")
            log.completions.append(lease.id)


def _race(services: Services, operations: int, workers: int) -> None:
    ops = OpsClient(services)
    started = time.monotonic()
    ids = _create_many(ops, operations, workers)
    created = time.monotonic()
    assert len(set(ids)) == operations

    log = RaceLog()
    give_up_at = time.monotonic() + RACE_BUDGET_SECONDS
    with ThreadPoolExecutor(workers) as pool:
        futures = [pool.submit(_worker, ops, operations, log, give_up_at) for _ in range(workers)]
        for future in futures:
            future.result()
    finished = time.monotonic()
    race_seconds = finished - created
    print(
        f"\n[{services.db.dialect}] {operations} ops, {workers} workers: "
        f"create {created - started:.2f}s ({operations / (created - started):.0f}/s), "
        f"claim+heartbeat+complete {race_seconds:.2f}s ({operations / race_seconds:.0f} ops/s), "
        f"empty claims {log.empty_claims}"
    )

    assert log.errors == []
    claims_per_operation = Counter(operation_id for operation_id, _ in log.claims)
    assert set(claims_per_operation) == set(ids)
    assert set(claims_per_operation.values()) == {1}
    assert {attempt for _, attempt in log.claims} == {1}
    completions = Counter(log.completions)
    assert set(completions) == set(ids)
    assert set(completions.values()) == {1}

    assert ops.state_counts() == {"succeeded": operations}
    notifications = ops.notifications_per_operation()
    assert set(notifications) == set(ids)
    assert set(notifications.values()) == {1}
    progress = rows(
        services.db,
        select(UserOperation.progress_percent, UserOperation.attempt, func.count()).group_by(
            UserOperation.progress_percent, UserOperation.attempt
        ),
    )
    assert [tuple(row) for row in progress] == [(100, 1, operations)]
    listed: list[str] = []
    for owner in OWNER_IDS:
        expected = len([i for i in range(operations) if OWNER_IDS[i % len(OWNER_IDS)] == owner])
        assert ops.unread(owner) == expected
        # notifications made at one instant page by id: none lost, none repeated
        notes = ops.all_notifications(owner)
        assert len(notes) == expected
        listed += [note.operation_id for note in notes]
    assert sorted(listed) == sorted(ids)


@pytest.mark.parametrize("engine_name", ["sqlite"])
def test_four_workers_complete_two_hundred_operations_exactly_once_on_sqlite(
    db_url: str,
) -> None:
    with running_services(db_url, ManualClock()) as services:
        _race(services, operations=200, workers=4)


# ---- idempotent creates ------------------------------------------------------------------------


@pytest.fixture
def services(db_url: str) -> Iterator[Services]:
    with running_services(db_url, ManualClock()) as running:
        yield running


def _operation_count(services: Services) -> int:
    return int(scalar(services.db, select(func.count()).select_from(UserOperation)) or 0)


def _together(
    count: int, call: Callable[[int], pb.CreateOperationResponse]
) -> list[pb.CreateOperationResponse | RpcFailure]:
    barrier = threading.Barrier(count)

    def run(index: int) -> pb.CreateOperationResponse | RpcFailure:
        barrier.wait(timeout=30)
        try:
            return call(index)
        except grpc.RpcError as error:
            return failure_of(error)

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(run, range(count)))


def test_fifty_identical_concurrent_creates_make_one_operation(
    services: Services,
) -> None:
    ops = OpsClient(services)
    request = ops.create_request("same-key", subject_id="job-42", max_attempts=4)
    answers = _together(50, lambda _: ops.create_raw(ALICE, request))
    responses = [answer for answer in answers if isinstance(answer, pb.CreateOperationResponse)]
    assert len(responses) == 50, [a for a in answers if isinstance(a, RpcFailure)]
    assert len({response.operation.id for response in responses}) == 1
    assert sum(response.created for response in responses) == 1
    assert _operation_count(services) == 1
    operation_id = responses[0].operation.id

    for other in (
        ops.create_request("same-key", subject_id="job-43", max_attempts=4),
        ops.create_request("same-key", subject_id="job-42", max_attempts=5),
        ops.create_request("same-key", subject_id="job-42", max_attempts=4, priority=3),
    ):
        expect_failure(
            lambda other=other: ops.create_raw(ALICE, other),  # type: ignore[misc]
            grpc.StatusCode.ALREADY_EXISTS,
            "idempotency_conflict",
        )
    # a repeated click computes a later deadline for the same work: still the same request
    with_deadline = ops.create_request(
        "same-key", subject_id="job-42", max_attempts=4, deadline=later(services, 60)
    )
    again = ops.create_raw(ALICE, with_deadline)
    assert (again.created, again.operation.id) == (False, operation_id)
    assert _operation_count(services) == 1

    bobs = ops.create_raw(BOB, request)
    assert bobs.created is True
    assert bobs.operation.id != operation_id
    assert ops.create_raw(BOB, request).operation.id == bobs.operation.id
    assert _operation_count(services) == 2
    owners = dict(rows(services.db, select(UserOperation.id, UserOperation.owner_user_id)))
    assert owners == {operation_id: ALICE, bobs.operation.id: BOB}
    # another task type is another idempotency scope too
    assert ops.create_raw(ALICE, ops.create_request("same-key", task_type=OTHER_TASK)).created


def test_concurrent_creates_with_one_key_but_two_requests_let_one_request_win(
    services: Services,
) -> None:
    ops = OpsClient(services)
    first = ops.create_request("contested", subject_id="job-1")
    second = ops.create_request("contested", subject_id="job-2")
    answers = _together(50, lambda i: ops.create_raw(ALICE, (first, second)[i % 2]))
    responses = [answer for answer in answers if isinstance(answer, pb.CreateOperationResponse)]
    conflicts = [answer for answer in answers if isinstance(answer, RpcFailure)]
    assert len(responses) == 25
    assert len(conflicts) == 25
    assert {(c.code, c.error_code) for c in conflicts} == {
        (grpc.StatusCode.ALREADY_EXISTS, "idempotency_conflict")
    }
    assert len({response.operation.id for response in responses}) == 1
    assert sum(response.created for response in responses) == 1
    winner = responses[0].operation.subject.id
    assert winner in ("job-1", "job-2")
    assert _operation_count(services) == 1


def test_concurrent_creates_by_many_owners_make_one_operation_each(
    services: Services,
) -> None:
    ops = OpsClient(services)
    request = ops.create_request("shared-key")
    owners = [f"user-{i % 10}" for i in range(50)]
    answers = _together(50, lambda i: ops.create_raw(owners[i], request))
    responses = [answer for answer in answers if isinstance(answer, pb.CreateOperationResponse)]
    assert len(responses) == 50
    ids_by_owner: dict[str, set[str]] = {}
    for owner, response in zip(owners, responses, strict=True):
        ids_by_owner.setdefault(owner, set()).add(response.operation.id)
    assert all(len(ids) == 1 for ids in ids_by_owner.values())
    assert len(set().union(*ids_by_owner.values())) == 10
    assert sum(response.created for response in responses) == 10
    assert _operation_count(services) == 10
    lease = ops.claim_one()
    assert lease.operation.state == RUNNING


# ---- owners, workers and the sweeper at once -------------------------------------------------


def test_cancels_racing_workers_and_the_sweeper_end_each_operation_once(
    services: Services,
) -> None:
    """Owners cancel a third of the operations while workers run them and sweeps run.

    Each cancel meets a queued operation (cancelled at once), a running one (the
    worker learns it from its heartbeat and acknowledges, or completes first) or a
    finished one (``already_terminal``). Whatever the interleaving, every
    operation ends once, in a terminal state, with exactly one matching notification.
    """
    ops = OpsClient(services)
    total = 240
    ids = _create_many(ops, total, 6)
    owner_of = {operation_id: OWNER_IDS[i % len(OWNER_IDS)] for i, operation_id in enumerate(ids)}
    targets = ids[::4]  # every priority, so cancels meet queued, running and finished ones
    log = RaceLog()
    refused: list[str] = []
    outcomes_of_cancel: Counter[str] = Counter()
    acknowledged: list[str] = []
    stop = threading.Event()

    def work() -> None:
        while not stop.is_set():
            lease = ops.claim((TASK, OTHER_TASK), lease_seconds=60)
            if lease is None:
                time.sleep(0.002)
                continue
            with log.lock:
                log.claims.append((lease.id, lease.operation.attempt))
            # two beats a little apart: a window in which an owner may cancel a running one
            first = ops.heartbeat_once(lease, progress=10)
            time.sleep(0.01)
            if first.cancel_requested or ops.heartbeat_once(lease, progress=90).cancel_requested:
                state = ops.acknowledge_cancel(lease)
                with log.lock:
                    acknowledged.append(lease.id)
            else:
                state = ops.complete(lease)
            with log.lock:
                log.completions.append(lease.id)
                if state not in (SUCCEEDED, pb.OPERATION_STATE_CANCELLED):
                    log.errors.append(f"{lease.id}: ended {state}")

    def cancel_targets() -> None:
        for operation_id in targets:
            time.sleep(0.015)  # spread the cancels over the whole run
            try:
                answer = ops.cancel(owner_of[operation_id], operation_id)
            except grpc.RpcError as error:
                failure = failure_of(error)
                if (failure.code, failure.error_code) != (
                    grpc.StatusCode.FAILED_PRECONDITION,
                    "already_terminal",
                ):
                    refused.append(f"{operation_id}: {failure}")
                outcomes_of_cancel["already_terminal"] += 1
                continue
            outcomes_of_cancel[pb.OperationState.Name(answer.state)] += 1
            if answer.state == RUNNING:
                assert answer.cancel_requested

    def sweep() -> None:
        while not stop.is_set():
            services.sweep()
            time.sleep(0.005)

    with ThreadPoolExecutor(8) as pool:
        background = [pool.submit(work) for _ in range(5)] + [pool.submit(sweep)]
        pool.submit(cancel_targets).result(timeout=RACE_BUDGET_SECONDS)
        give_up_at = time.monotonic() + RACE_BUDGET_SECONDS
        while time.monotonic() < give_up_at and not any(f.done() for f in background):
            counts = ops.state_counts()
            if counts.get("queued", 0) + counts.get("running", 0) == 0:
                break
            time.sleep(0.02)
        stop.set()
        for future in background:
            future.result(timeout=30)

    assert refused == []
    assert log.errors == []
    claims = Counter(operation_id for operation_id, _ in log.claims)
    assert set(claims.values()) <= {1}
    assert Counter(log.completions) == claims
    assert set(ids) - set(targets) <= set(claims)  # everything not cancelled was run

    states = dict(rows(services.db, select(UserOperation.id, UserOperation.state)))
    assert set(states) == set(ids)
    assert {operation_id for operation_id, state in states.items() if state != "succeeded"} <= set(
        targets
    )
    assert set(states.values()) <= {"succeeded", "cancelled"}
    notifications = ops.notifications_per_operation()
    assert notifications == dict.fromkeys(ids, 1)
    outcomes: dict[str, str] = {}
    for owner in OWNER_IDS:
        for note in ops.all_notifications(owner):
            outcomes[note.operation_id] = note.outcome
    assert outcomes == states
    assert set(acknowledged) <= {i for i, state in states.items() if state == "cancelled"}
    assert sum(outcomes_of_cancel.values()) == len(targets)
    print(
        f"\n[{services.db.dialect}] {total} ops, {len(targets)} cancels answered "
        f"{dict(outcomes_of_cancel)}; {len(acknowledged)} acknowledged by workers, "
        f"{len(claims)} claimed"
    )
