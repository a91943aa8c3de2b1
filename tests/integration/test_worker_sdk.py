"""The worker SDK (``durable_ops.worker``, ADR 0023) against the real server, on both engines.

Handlers for any task type; claims and completions in batches; progress and
the owner's cancel reach a running handler; failures are retryable or
permanent by exception type; ``stop()`` lets running attempts finish or releases
them. Timeouts only keep a broken build from hanging; nothing is timed.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import TypeVar

import pytest
from sqlalchemy import select
from structlog.testing import capture_logs

from durable_ops.ai_worker import failures as ai_failures
from durable_ops.model.errors import InvalidArgument
from durable_ops.model.scope import Role
from durable_ops.storage.schema import OperationAttempt
from durable_ops.worker import (
    Attempt,
    ExternalFallback,
    HandlerFailure,
    PermanentFailure,
    RetryableFailure,
    Worker,
    WorkerOptions,
)
from durable_ops.worker.failures import failure_of
from tests.support.grpc_services import Services
from tests.support.keys import signing_key
from tests.support.operations_client import (
    ALICE,
    BOB,
    CANCELLED,
    FAILED,
    OTHER_TASK,
    OWNER_IDS,
    QUEUED,
    RUNNING,
    SUCCEEDED,
    TASK,
    WAITING_FOR_RETRY,
    OpsClient,
)
from tests.support.running_worker import run_until
from tests.support.stored import rows

HANG_GUARD = 30.0
SECRET = "a secret in the message"
T = TypeVar("T")


def _worker(services: Services, **options: float) -> Worker:
    return Worker(services.target, signing_key(Role.WORKER), WorkerOptions(**options))  # type: ignore[arg-type]


async def _state_is(ops: OpsClient, owner: str, operation_id: str, state: int) -> None:
    while (await asyncio.to_thread(ops.get, owner, operation_id)).state != state:
        await asyncio.sleep(0.02)


def test_a_worker_drains_many_owners_work_in_batches(services: Services, ops: OpsClient) -> None:
    ids = [ops.create(OWNER_IDS[n % 4], f"k-sdk-{n}", subject_id=f"s-{n}").id for n in range(30)]
    seen: list[tuple[str, str, str]] = []
    worker = Worker(
        services.target,
        signing_key(Role.WORKER),
        WorkerOptions(concurrency=4, batch_size=5),
        until_empty=True,
    )

    @worker.handler(TASK)
    async def record(attempt: Attempt) -> str:
        seen.append((attempt.operation_id, attempt.owner_id, attempt.subject.id))
        return f"result-{attempt.subject.id}"

    asyncio.run(asyncio.wait_for(worker.run(), HANG_GUARD))
    assert sorted(operation_id for operation_id, _, _ in seen) == sorted(ids)
    assert worker.completed == 30
    assert ops.state_counts() == {"succeeded": 30}
    assert ops.notifications_per_operation() == dict.fromkeys(ids, 1)
    assert ops.row(ids[7]).result_ref == "result-s-7"


def test_failures_are_permanent_or_retryable_by_exception_type(
    services: Services, ops: OpsClient
) -> None:
    permanent = ops.create(ALICE, "k-permanent", subject_id="permanent").id
    retryable = ops.create(ALICE, "k-retryable", subject_id="retryable").id
    crashed = ops.create(BOB, "k-crashed", subject_id="crashed").id
    worker = _worker(services)

    @worker.handler(TASK)
    async def fail(attempt: Attempt) -> None:
        if attempt.subject.id == "permanent":
            raise PermanentFailure("unsupported_subject", "this subject cannot be analysed")
        if attempt.subject.id == "retryable":
            raise RetryableFailure("model_busy")
        raise KeyError(SECRET.upper())  # made as it runs: the stack shows code, not values

    async def all_failed() -> None:
        await _state_is(ops, ALICE, permanent, FAILED)
        await _state_is(ops, ALICE, retryable, WAITING_FOR_RETRY)
        await _state_is(ops, BOB, crashed, WAITING_FOR_RETRY)

    with capture_logs() as logs:
        run_until(worker, all_failed)
    (raised,) = [line for line in logs if line["event"] == "worker_handler_raised"]
    assert raised["error_type"] == "KeyError"
    assert "raise KeyError" in raised["stack"]
    # One line for each failure, by its code: a handler's message is not logged.
    failures = {
        line["operation_id"]: (line["code"], line["retryable"])
        for line in logs
        if line["event"] == "worker_attempt_failed"
    }
    assert failures == {
        permanent: ("unsupported_subject", False),
        retryable: ("model_busy", True),
        crashed: ("handler_error", True),
    }
    (stopped,) = [line for line in logs if line["event"] == "worker_stopped"]
    assert (stopped["completed"], stopped["failed"]) == (0, 3)
    assert SECRET.upper() not in repr(logs)
    assert "this subject cannot be analysed" not in repr(logs)
    assert (ops.row(permanent).failure_code, ops.row(permanent).failure_message) == (
        "unsupported_subject",
        "this subject cannot be analysed",
    )
    assert ops.row(retryable).failure_code == "model_busy"
    # Any other exception: retryable, named by its type only (its text may hold user content).
    assert (ops.row(crashed).failure_code, ops.row(crashed).failure_message) == (
        "handler_error",
        "KeyError",
    )
    assert ops.notifications_per_operation() == {permanent: 1}


def test_what_no_completion_can_carry_fails_the_operation_and_the_worker_goes_on(
    services: Services, ops: OpsClient
) -> None:
    """A handler returning a number, or a result instead of its reference, fails its
    operation for good (``invalid_result``)."""
    ids = {
        name: ops.create(ALICE, f"k-{n}", subject_id=name.replace(" ", "-")).id
        for n, name in enumerate(RETURNS)
    }
    worker = Worker(services.target, signing_key(Role.WORKER), until_empty=True)

    @worker.handler(TASK)  # type: ignore[arg-type]  # the mistake under test
    async def wrong(attempt: Attempt) -> object:
        return RETURNS[attempt.subject.id.replace("-", " ")]

    with capture_logs() as logs:
        asyncio.run(asyncio.wait_for(worker.run(), HANG_GUARD))
    for name in ("number", "whole result"):
        row = ops.row(ids[name])
        assert (row.state, row.failure_code) == ("failed", "invalid_result"), name
    assert ops.row(ids["reference"]).state == "succeeded"
    assert [line["event"] for line in logs].count("worker_result_refused") == 2


RETURNS: dict[str, object] = {
    "number": 42,
    "whole result": "r" * 65,
    "reference": "r" * 64,
}


async def _call_wrongly(attempt: Attempt) -> None:
    """Each subject a mistake: two calls of the SDK out of its bounds, and the handler's own
    ``InvalidArgument``, which the SDK did not raise."""
    if attempt.subject.id == "progress":
        await attempt.progress(150)
    if attempt.subject.id == "code":
        raise PermanentFailure("Bad Code!")
    raise InvalidArgument("cv", SECRET)


@pytest.mark.parametrize(
    ("classify", "own_error"),
    [
        (failure_of, ("waiting_for_retry", "handler_error", "InvalidArgument")),
        # The AI worker's classify: its own InvalidArgument is input the task cannot use.
        (ai_failures.settlement, ("failed", "invalid_input", f"cv: {SECRET}")),
    ],
)
def test_a_call_of_the_sdk_out_of_its_bounds_fails_at_once_saying_why(
    services: Services,
    ops: OpsClient,
    classify: Callable[[Exception], HandlerFailure | ExternalFallback],
    own_error: tuple[str, str, str],
) -> None:
    """Whatever ``classify`` says: the same handler would make the same call on every
    attempt, and the SDK's own message (no user content) is stored and logged."""
    subjects = [*WRONG_CALLS, "own"]
    ids = {name: ops.create(ALICE, f"k-{name}", subject_id=name).id for name in subjects}
    worker = Worker(services.target, signing_key(Role.WORKER), until_empty=True, classify=classify)
    worker.handler(TASK)(_call_wrongly)

    with capture_logs() as logs:
        asyncio.run(asyncio.wait_for(worker.run(), HANG_GUARD))
    for name, why in WRONG_CALLS.items():
        row = ops.row(ids[name])
        assert (row.state, row.attempt) == ("failed", 1), name
        assert (row.failure_code, row.failure_message) == ("invalid_handler_call", why)
    refused = {
        line["operation_id"]: (line["why"], "_call_wrongly" in line["stack"])
        for line in logs
        if line["event"] == "worker_handler_call_refused"
    }
    assert refused == {ids[name]: (why, True) for name, why in WRONG_CALLS.items()}
    # Only what the SDK raised: the handler's own InvalidArgument is classified as before.
    own = ops.row(ids["own"])
    assert (own.state, own.failure_code, own.failure_message) == own_error
    if classify is failure_of:  # the AI worker's classify stores the message of its own
        assert SECRET not in repr(logs)


WRONG_CALLS = {
    "progress": "progress_percent: must be between 0 and 100",
    "code": "failure_code: may contain only a-z, 0-9, '.', '_' and '-'",
}


def test_progress_and_the_owners_cancel_reach_a_running_handler(
    services: Services, ops: OpsClient
) -> None:
    created = ops.create(ALICE, "k-long", task_type=OTHER_TASK).id
    reported = threading.Event()
    stopped: list[bool] = []
    worker = _worker(services, lease_seconds=30)

    @worker.handler(OTHER_TASK)
    async def long_work(attempt: Attempt) -> None:
        await attempt.progress(40)
        reported.set()
        try:
            await asyncio.sleep(HANG_GUARD)
        except asyncio.CancelledError:
            stopped.append(attempt.cancelled.is_set())
            raise

    async def cancelled() -> None:
        await asyncio.to_thread(reported.wait, HANG_GUARD)
        while ops.get(ALICE, created).progress_percent != 40:
            await asyncio.sleep(0.02)
        assert ops.get(ALICE, created).state == RUNNING
        await asyncio.to_thread(ops.cancel, ALICE, created)
        await _state_is(ops, ALICE, created, CANCELLED)

    run_until(worker, cancelled)
    assert stopped == [True]  # the handler saw the cancel, then its task was cancelled
    (attempt,) = rows(services.db, select(OperationAttempt))
    assert attempt.outcome == "cancelled"


def test_stop_lets_short_jobs_finish_and_hands_the_rest_back(
    services: Services, ops: OpsClient
) -> None:
    """A stop gives running handlers their grace, then cancels the late one as a shutdown
    and releases its lease: queued at once with its progress, its attempt not spent; the
    next worker takes it on its first claim and it succeeds as attempt 1 of a budget of 1."""
    quick = ops.create(ALICE, "k-quick", subject_id="quick").id
    slow = ops.create(BOB, "k-slow", subject_id="slow", max_attempts=1).id
    started: set[str] = set()
    shut_down: list[tuple[bool, bool]] = []
    worker = _worker(services, shutdown_seconds=0.3)

    @worker.handler(TASK)
    async def work(attempt: Attempt) -> None:
        started.add(attempt.subject.id)
        if attempt.subject.id == "quick":
            await asyncio.sleep(0.1)
            return
        await attempt.progress(51)
        try:
            await asyncio.sleep(HANG_GUARD)
        except asyncio.CancelledError:
            shut_down.append((attempt.shutting_down, attempt.cancelled.is_set()))
            raise

    async def both_started() -> None:
        while started != {"quick", "slow"} or ops.row(slow).progress_percent != 51:
            await asyncio.sleep(0.01)

    run_until(worker, both_started)
    assert shut_down == [(True, False)]  # a shutdown, not the owner's cancel
    assert ops.get(ALICE, quick).state == SUCCEEDED
    handed_back = ops.get(BOB, slow)
    assert (handed_back.state, handed_back.progress_percent) == (QUEUED, 51)
    assert (ops.row(slow).attempt, ops.row(slow).failure_code) == (0, None)
    assert ops.notification_rows(slow) == []

    numbers: list[int] = []
    again = _worker(services)

    @again.handler(TASK)
    async def finish(attempt: Attempt) -> None:
        numbers.append(attempt.number)

    # Claimable at once: no lease to wait out (a lost one would keep it for 30 s).
    assert ops.row(slow).lease_expires_at is None
    run_until(again, lambda: _state_is(ops, BOB, slow, SUCCEEDED))
    assert numbers == [1]
    of_slow = OperationAttempt.operation_id == slow
    history = rows(services.db, select(OperationAttempt).where(of_slow))
    assert sorted((a.attempt, a.outcome) for a in history) == [(1, "released"), (1, "succeeded")]


class _HeldJobs:
    """A worker of four slots whose attempts run until released; ``started`` in start order."""

    def __init__(self, services: Services, gather_seconds: float) -> None:
        self.release: dict[str, asyncio.Event] = {}
        self.started: list[str] = []
        self.worker = _worker(
            services, concurrency=4, batch_size=4, claim_gather_seconds=gather_seconds
        )
        self.worker.handler(TASK)(self._held)

    async def _held(self, attempt: Attempt) -> None:
        self.release[attempt.subject.id] = asyncio.Event()
        self.started.append(attempt.subject.id)
        await self.release[attempt.subject.id].wait()

    async def until_started(self, count: int) -> None:
        while len(self.started) < count:
            await asyncio.sleep(0.01)

    def let_go(self, number: int) -> None:
        self.release[self.started[number]].set()

    def let_all_go(self) -> None:
        for event in self.release.values():
            event.set()


def test_a_busy_worker_gathers_free_slots_before_it_claims_again(
    services: Services, ops: OpsClient
) -> None:
    """Of four slots all busy, one ending leaves less than half a claim's worth free: the
    worker waits (here up to a second) for a second one, then claims both in one call."""
    for n in range(8):
        ops.create(OWNER_IDS[n % 4], f"k-gather-{n}", subject_id=f"g-{n}")
    attempts = _HeldJobs(services, gather_seconds=1.0)

    async def scenario() -> tuple[int, int]:
        await attempts.until_started(4)
        attempts.let_go(0)
        await asyncio.sleep(0.25)  # well inside the gather: no claim for the one free slot
        while_gathering = len(attempts.started)
        attempts.let_go(1)
        await attempts.until_started(6)
        await asyncio.sleep(0.2)
        after = len(attempts.started)
        attempts.let_all_go()
        return while_gathering, after

    while_gathering, after = run_until(attempts.worker, scenario)
    assert while_gathering == 4
    assert after == 6  # two slots, one claim of two
    assert attempts.worker.completed >= 6


def test_after_a_short_claim_the_next_waits_the_window(services: Services, ops: OpsClient) -> None:
    """A claim that took less than it asked for (one of four) holds the next claim back for
    ``claim_gather_seconds`` (here a second): what arrives meanwhile is claimed together."""
    ops.create(OWNER_IDS[0], "k-trickle-0", subject_id="t-0")
    attempts = _HeldJobs(services, gather_seconds=1.0)

    async def scenario() -> int:
        await attempts.until_started(1)
        for n in (1, 2):
            ops.create(OWNER_IDS[n], f"k-trickle-{n}", subject_id=f"t-{n}")
        await asyncio.sleep(0.25)  # inside the window: the two wait for the next claim
        while_cooling = len(attempts.started)
        await attempts.until_started(3)
        attempts.let_all_go()
        return while_cooling

    assert run_until(attempts.worker, scenario) == 1
    assert attempts.started[1:] in (["t-1", "t-2"], ["t-2", "t-1"])


def test_gathering_free_slots_is_bounded_in_time(services: Services, ops: OpsClient) -> None:
    """One slot of four freed and no other: after ``claim_gather_seconds`` it is claimed."""
    for n in range(5):
        ops.create(OWNER_IDS[n % 4], f"k-bounded-{n}", subject_id=f"b-{n}")
    attempts = _HeldJobs(services, gather_seconds=0.2)

    async def scenario() -> None:
        await attempts.until_started(4)
        attempts.let_go(0)
        await attempts.until_started(5)
        attempts.let_all_go()

    run_until(attempts.worker, scenario)
    assert len(attempts.started) == 5
