"""``durable_ops.worker.testing`` and a real ``Worker`` against the real server, on both
engines, end the same handler the same way: what a handler's unit test says is what the
worker settles and the service stores."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.model.scope import Role
from durable_ops.storage.schema import UserOperation
from durable_ops.worker import (
    Attempt,
    Completed,
    Ending,
    ExternalFallback,
    HandlerFailure,
    PermanentFailure,
    Privacy,
    Provenance,
    Route,
    Subject,
    Usage,
    Worker,
    WorkerOptions,
)
from durable_ops.worker.testing import HandlerRun, HandlerTest
from tests.support.grpc_services import Services
from tests.support.keys import signing_key
from tests.support.operations_client import ALICE, OTHER_TASK, OpsClient
from tests.support.running_worker import run_until

HANG_GUARD = 30.0
LOCAL = Provenance(provider="127.0.0.1", model="small", route="local")
SUBJECT_TYPE = "attachment"  # a cv.review's, which may go external
# Each subject a way to end; the last two wait, at that progress, for the owner's cancel or
# the worker's stop.
SUBJECTS = ("done", "permanent", "crashed", "wrong-call", "fallback", "cancel", "shutdown")
WAITS_AT = {"cancel": 40, "shutdown": 60}
# How an attempt ended, as the service stores it: the ending, failure code and message,
# result reference, provider and model, tokens.
Settled = tuple[Ending | None, str, str, str, str, str, int, int]


async def review(attempt: Attempt) -> Completed | None:
    name = attempt.subject.id
    if name == "done":
        await attempt.progress(30)
        attempt.used(Usage(prompt_tokens=12, completion_tokens=3), LOCAL)
        return Completed(f"reviews/{name}", LOCAL)
    if name == "permanent":
        raise PermanentFailure("unreadable_attachment", "cannot be read")
    if name == "crashed":
        raise KeyError(name)
    if name == "wrong-call":
        await attempt.progress(150)
    if name == "fallback":
        attempt.used(Usage(prompt_tokens=7), LOCAL)
        raise ExternalFallback("circuit_open", provenance=LOCAL)
    await attempt.progress(WAITS_AT[name])
    await asyncio.sleep(HANG_GUARD)
    return None


def _tested(name: str) -> Settled:
    test = HandlerTest(OTHER_TASK, Subject(SUBJECT_TYPE, name), privacy=Privacy.EXTERNAL_ALLOWED)
    if name == "cancel":
        test.cancel(at_progress=WAITS_AT[name])
    if name == "shutdown":
        test.shut_down(at_progress=WAITS_AT[name])
    run = asyncio.run(asyncio.wait_for(test.run(review), HANG_GUARD))
    return _from_run(run)


def _from_run(run: HandlerRun) -> Settled:
    outcome, code, message, ref = run.outcome, "", "", ""
    provenance = None
    if isinstance(outcome, Completed):
        ref, provenance = outcome.result_ref, outcome.provenance
    if isinstance(outcome, HandlerFailure):
        code, message, provenance = outcome.code, outcome.message, outcome.provenance
    if isinstance(outcome, ExternalFallback):
        provenance = outcome.provenance
    usage = run.usage or Usage()
    return (
        run.ending,
        code,
        message,
        ref,
        provenance.provider if provenance else "",
        provenance.model if provenance else "",
        usage.prompt_tokens,
        usage.completion_tokens,
    )


def _stored(ending: Ending | None, row: UserOperation) -> Settled:
    return (
        ending,
        row.failure_code or "",
        row.failure_message or "",
        row.result_ref or "",
        row.provider or "",
        row.model or "",
        row.prompt_tokens,
        row.completion_tokens,
    )


def test_a_handler_ends_the_same_in_its_unit_test_and_in_a_real_worker(
    services: Services, ops: OpsClient
) -> None:
    ids: dict[str, str] = {}
    for name in SUBJECTS:
        request = ops.create_request(
            f"k-{name}", task_type=OTHER_TASK, subject_type=SUBJECT_TYPE, subject_id=name
        )
        request.privacy = pb.PRIVACY_EXTERNAL_ALLOWED
        ids[name] = ops.create_raw(ALICE, request).operation.id
    endings: dict[str, Ending | None] = {}

    @asynccontextmanager
    async def ending(attempt: Attempt) -> AsyncIterator[None]:
        yield  # exited once the attempt is settled
        endings[attempt.subject.id] = attempt.ending

    # The local route only: a fallen-back operation waits, unclaimed, for another worker.
    options = WorkerOptions(routes=(Route.LOCAL,), shutdown_seconds=0.2)
    worker = Worker(services.target, signing_key(Role.WORKER), options, interceptors=[ending])
    worker.handler(OTHER_TASK)(review)

    async def all_but_the_shutdown_ended() -> None:
        while ops.get(ALICE, ids["cancel"]).progress_percent != WAITS_AT["cancel"]:
            await asyncio.sleep(0.02)
        await asyncio.to_thread(ops.cancel, ALICE, ids["cancel"])
        while set(endings) != set(SUBJECTS) - {"shutdown"}:
            await asyncio.sleep(0.02)
        while ops.get(ALICE, ids["shutdown"]).progress_percent != WAITS_AT["shutdown"]:
            await asyncio.sleep(0.02)

    run_until(worker, all_but_the_shutdown_ended)  # then stopped: the shutdown released
    worker_settled = {name: _stored(endings[name], ops.row(ids[name])) for name in SUBJECTS}
    tested = {name: _tested(name) for name in SUBJECTS}
    assert tested == worker_settled
    # Each way to end was played, and settled as it says.
    assert {name: settled[0] for name, settled in tested.items()} == {
        "done": Ending.COMPLETED,
        "permanent": Ending.FAILED,
        "crashed": Ending.FAILED,
        "wrong-call": Ending.FAILED,
        "fallback": Ending.FELL_BACK,
        "cancel": Ending.CANCELLED,
        "shutdown": Ending.RELEASED,
    }
    assert tested["wrong-call"][1:3] == (
        "invalid_handler_call",
        "progress_percent: must be between 0 and 100",
    )
