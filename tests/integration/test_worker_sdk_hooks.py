"""What the worker SDK offers a worker beyond a handler (ADR 0027), against the real
server on both engines: routes named in every claim, the claimed operation's
fields, ``interceptors``, ``classify``, the external fallback, provenance, fenced
writes and a waiting claim given up on stop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.model.scope import Role
from durable_ops.worker import (
    CANCEL_REQUESTED,
    Attempt,
    Completed,
    ExternalFallback,
    HandlerFailure,
    Interceptor,
    LeaseLost,
    Privacy,
    Provenance,
    RetryableFailure,
    Route,
    Worker,
    WorkerOptions,
)
from durable_ops.worker.failures import failure_of
from tests.support.grpc_services import Services
from tests.support.keys import signing_key
from tests.support.operations_client import ALICE, BOB, CANCELLED, OTHER_TASK, OpsClient

HANG_GUARD = 30.0
LOCAL = Provenance(provider="127.0.0.1", model="small", route="local")
EXTERNAL = Provenance(provider="api.example.com", model="large", route="external")


def _create(ops: OpsClient, owner: str, key: str, priority: int = 0) -> str:
    """A ``cv.review`` (a task that may go external) whose owner allowed external routes.

    The service's clock stands still here: ``priority`` orders the claims.
    """
    request = ops.create_request(
        key, task_type=OTHER_TASK, subject_type="attachment", priority=priority
    )
    request.privacy = pb.PRIVACY_EXTERNAL_ALLOWED
    return str(ops.create_raw(owner, request).operation.id)


def _drain(services: Services, options: WorkerOptions, **kwargs: object) -> Worker:
    return Worker(services.target, signing_key(Role.WORKER), options, until_empty=True, **kwargs)  # type: ignore[arg-type]


def _run(worker: Worker) -> None:
    asyncio.run(asyncio.wait_for(worker.run(), HANG_GUARD))


def test_a_fallback_waits_for_a_worker_that_names_the_external_route_in_turn(
    services: Services, ops: OpsClient
) -> None:
    fallen = _create(ops, ALICE, "k-fallen")
    local_only = Worker(
        services.target,
        signing_key(Role.WORKER),
        WorkerOptions(routes=(Route.LOCAL,)),
        until_empty=True,
    )

    @local_only.handler(OTHER_TASK)
    async def local_down(attempt: Attempt) -> str:
        raise ExternalFallback("circuit_open", provenance=LOCAL)

    _run(local_only)
    assert ops.row(fallen).state == "waiting_for_external_fallback"
    assert (ops.row(fallen).provider, ops.row(fallen).route) == ("127.0.0.1", "local")
    first, second = _create(ops, BOB, "k-local-1", 2), _create(ops, BOB, "k-local-2", 1)

    both = _drain(
        services, WorkerOptions(concurrency=1, batch_size=1, routes=(Route.LOCAL, Route.EXTERNAL))
    )
    seen: list[tuple[str, Route, Privacy, int]] = []

    @both.handler(OTHER_TASK)
    async def record(attempt: Attempt) -> Completed:
        seen.append((attempt.operation_id, attempt.route, attempt.privacy, attempt.number))
        provenance = EXTERNAL if attempt.route is Route.EXTERNAL else LOCAL
        return Completed(f"note-{attempt.operation_id}", provenance)

    _run(both)
    # Each claim starts with the next route: the fallback is served between local work.
    assert seen == [
        (first, Route.LOCAL, Privacy.EXTERNAL_ALLOWED, 1),
        (fallen, Route.EXTERNAL, Privacy.EXTERNAL_ALLOWED, 1),  # the same attempt, continued
        (second, Route.LOCAL, Privacy.EXTERNAL_ALLOWED, 1),
    ]
    row = ops.row(fallen)
    assert (row.state, row.result_ref) == ("succeeded", f"note-{fallen}")
    assert (row.provider, row.model, row.route) == ("api.example.com", "large", "external")
    assert ops.row(first).route == "local"


def test_an_interceptor_wraps_each_attempt_and_sees_how_it_ended(
    services: Services, ops: OpsClient
) -> None:
    done = _create(ops, ALICE, "k-done", priority=1)
    failed = _create(ops, BOB, "k-failed")
    wrapped: list[tuple[str, str]] = []

    @asynccontextmanager
    async def around(attempt: Attempt) -> AsyncIterator[None]:
        wrapped.append((attempt.operation_id, "enter"))
        yield
        ending = attempt.ending.value if attempt.ending else "none"
        wrapped.append((attempt.operation_id, f"{ending} {attempt.result}"))

    worker = _drain(services, WorkerOptions(concurrency=1, batch_size=1), interceptors=[around])

    @worker.handler(OTHER_TASK)
    async def work(attempt: Attempt) -> Completed:
        wrapped.append((attempt.operation_id, "handler"))
        if attempt.operation_id == failed:
            raise RetryableFailure("model_busy", provenance=LOCAL)
        return Completed("note-1", LOCAL)

    _run(worker)
    assert wrapped == [
        (done, "enter"),
        (done, "handler"),
        (done, f"completed {Completed('note-1', LOCAL)}"),
        (failed, "enter"),
        (failed, "handler"),
        (failed, "failed None"),
    ]
    assert (ops.row(failed).failure_code, ops.row(failed).model) == ("model_busy", "small")


def test_interceptors_nest_in_their_order(services: Services, ops: OpsClient) -> None:
    _create(ops, ALICE, "k-nested")
    seen: list[str] = []

    def recording(name: str) -> Interceptor:
        @asynccontextmanager
        async def around(attempt: Attempt) -> AsyncIterator[None]:
            seen.append(f"{name} enter")
            yield
            seen.append(f"{name} exit {attempt.ending}")

        return around

    interceptors = [recording("outer"), recording("inner")]
    worker = _drain(services, WorkerOptions(concurrency=1, batch_size=1), interceptors=interceptors)

    @worker.handler(OTHER_TASK)
    async def work(attempt: Attempt) -> None:
        seen.append(f"handler {attempt.subject.type} {attempt.number}")

    _run(worker)
    assert seen == [
        "outer enter",
        "inner enter",
        "handler attachment 1",
        "inner exit completed",
        "outer exit completed",
    ]


class JournalDown(Exception):
    """A worker's own bookkeeping failed: it must not run work it cannot record."""


def _journal_classify(error: Exception) -> HandlerFailure | ExternalFallback:
    if isinstance(error, JournalDown):
        return RetryableFailure("host_store_error", "the host journal failed")
    return failure_of(error)


@pytest.mark.parametrize("failing", ["enter", "exit"])
def test_a_failing_interceptor_stops_the_worker_and_run_raises_it(
    services: Services, ops: OpsClient, failing: str
) -> None:
    first = _create(ops, ALICE, "k-first", priority=1)
    handled: list[str] = []

    @asynccontextmanager
    async def around(attempt: Attempt) -> AsyncIterator[None]:
        if failing == "enter":
            raise JournalDown()
        yield
        raise JournalDown()

    worker = Worker(
        services.target,
        signing_key(Role.WORKER),
        WorkerOptions(concurrency=1, batch_size=1),
        interceptors=[around],
        classify=_journal_classify,
    )

    @worker.handler(OTHER_TASK)
    async def work(attempt: Attempt) -> None:
        handled.append(attempt.operation_id)
        await asyncio.to_thread(_create, ops, BOB, "k-second")  # more work arrives meanwhile

    if failing == "enter":
        _create(ops, BOB, "k-second")
    with pytest.raises(JournalDown):
        _run(worker)
    if failing == "enter":  # given back at once, with the worker's own code; nothing ran
        assert (ops.row(first).state, ops.row(first).failure_code) == (
            "waiting_for_retry",
            "host_store_error",
        )
        assert handled == []
    else:  # the attempt had ended; the worker stopped after it
        assert (ops.row(first).state, handled) == ("succeeded", [first])
    assert ops.state_counts()["queued"] == 1  # the worker claimed nothing more


def test_a_fenced_write_refused_for_the_owners_cancel_is_acknowledged(
    services: Services, ops: OpsClient
) -> None:
    created = _create(ops, ALICE, "k-refused")
    # The refusal alone tells the worker about the cancel (the attempt ends before its
    # lease joins the stream).
    worker = _drain(services, WorkerOptions(lease_seconds=60))

    @worker.handler(OTHER_TASK)
    async def publish(attempt: Attempt) -> str:
        await asyncio.to_thread(ops.cancel, ALICE, attempt.operation_id)
        raise LeaseLost("the owner cancelled first", code=CANCEL_REQUESTED)

    _run(worker)
    assert ops.get(ALICE, created).state == CANCELLED
    assert [row.outcome for row in ops.notification_rows(created)] == ["cancelled"]


def test_a_fenced_write_that_went_through_stands_although_the_cancel_came_meanwhile(
    services: Services, ops: OpsClient
) -> None:
    created = _create(ops, ALICE, "k-through")
    interrupted: list[bool] = []
    worker = _drain(services, WorkerOptions(lease_seconds=30))

    async def write(attempt: Attempt) -> str:
        await asyncio.to_thread(ops.cancel, ALICE, attempt.operation_id)  # pushed on the stream
        while not attempt.cancelled.is_set():
            await asyncio.sleep(0.01)
        interrupted.append(True)
        return "note-through"

    @worker.handler(OTHER_TASK)
    async def publish(attempt: Attempt) -> str:
        await attempt.hold()
        return await attempt.fenced(write(attempt))

    _run(worker)
    assert interrupted == [True]
    row = ops.row(created)
    assert (row.state, row.result_ref) == ("succeeded", "note-through")


def test_stop_gives_up_a_waiting_claim(services: Services) -> None:
    worker = Worker(services.target, signing_key(Role.WORKER), WorkerOptions())

    @worker.handler(OTHER_TASK)
    async def never(attempt: Attempt) -> None:
        raise AssertionError("there is no work")

    async def stopped_soon() -> float:
        loop = asyncio.get_running_loop()
        running = asyncio.create_task(worker.run())
        await asyncio.sleep(0.5)  # the claim is waiting in the service by now
        asked = loop.time()
        worker.stop()
        await asyncio.wait_for(running, HANG_GUARD)
        return loop.time() - asked

    assert asyncio.run(stopped_soon()) < 5  # not the claim's 10 s
