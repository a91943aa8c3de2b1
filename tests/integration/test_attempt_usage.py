"""Tokens and time on every attempt (issue 36, points 2 and 4), on both engines.

The worker's settlement carries what an attempt's model calls used; the one
transition writer keeps it on the attempt and adds it to the operation's
totals in the same transaction. So the totals always equal the sum over the
attempt rows; an attempt that settled nothing (its lease expired: a killed
worker) costs nothing; the owner's operation and ``opsctl operations show``
say it; the AI worker fills it from what the model server reported, on
either route, and an owner who forbids the external route spends nothing
there.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from prometheus_client import REGISTRY
from sqlalchemy import func, select

import durable_ops.gateway
from durable_ops.ai_worker.clients import AiSettings
from durable_ops.ai_worker.inference import ModelClient, Router
from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.api.operator.v1 import operator_pb2 as opb
from durable_ops.model.bounds import USAGE_TOKENS_MAX
from durable_ops.model.circuit import CircuitBreaker
from durable_ops.model.provenance import Provenance
from durable_ops.model.routing import Route
from durable_ops.model.scope import Role
from durable_ops.model.states import Plan, Privacy
from durable_ops.model.usage import Usage
from durable_ops.storage.schema import OperationAttempt, UserOperation
from durable_ops.worker import Attempt, Worker, WorkerOptions
from tests.integration.test_ai_worker_executor import Workspace, executor_on
from tests.support.ai_stack import ModelServer
from tests.support.ai_worker import Journal, drain
from tests.support.clock import ManualClock
from tests.support.gateway import bearer, gateway_client, make_app
from tests.support.grpc_services import Services
from tests.support.keys import signing_key
from tests.support.operations_client import (
    ALICE,
    BOB,
    CANCELLED,
    FAILED,
    QUEUED,
    SUCCEEDED,
    TASK,
    WAITING_FOR_RETRY,
    Lease,
    Metadata,
    OpsClient,
)
from tests.support.running_worker import run_until
from tests.support.stored import rows, scalar

RETRY_DELAY = 2
LEASE_SECONDS = 5
LOCAL = pb.Provenance(provider="127.0.0.1", model="gemma-3-270m", route="local")


Outcome = (
    pb.CompleteOperationRequest
    | pb.FailOperationRequest
    | pb.RequestExternalFallbackRequest
    | pb.AcknowledgeCancellationRequest
    | pb.ReleaseOperationRequest
)
_OUTCOME_FIELDS = {
    pb.CompleteOperationRequest: "complete",
    pb.FailOperationRequest: "fail",
    pb.RequestExternalFallbackRequest: "fallback",
    pb.AcknowledgeCancellationRequest: "acknowledge_cancel",
    pb.ReleaseOperationRequest: "release",
}


def _settle(ops: OpsClient, lease: Lease, usage: pb.Usage | None, outcome: Outcome) -> int:
    """One item on the settlement channel, as the worker SDK sends it; its outcome's state."""
    item = pb.SettleOperationsRequest.Item(owner_id=lease.owner, usage=usage)
    request = getattr(item, _OUTCOME_FIELDS[type(outcome)])
    request.CopyFrom(outcome)
    request.operation_id, request.lease_token = lease.id, lease.token
    reply: pb.LeaseMutationsResponse = ops.stub.SettleOperations(
        pb.SettleOperationsRequest(items=[item]), metadata=ops.neutral
    )
    (answer,) = reply.outcomes
    assert not answer.status_code, answer.error_code
    return int(answer.state)


def _used(prompt: int, completion: int, model_ms: int) -> pb.Usage:
    return pb.Usage(prompt_tokens=prompt, completion_tokens=completion, model_ms=model_ms)


def _attempt_usage(
    services: Services, md: Metadata, operation_id: str
) -> list[tuple[str, tuple[int, int, int] | None]]:
    """Each attempt's (outcome, usage or None), oldest first, as the operator reads them."""
    shown: opb.OperatorOperation = services.operator.GetOperation(
        opb.GetOperationRequest(operation_id=operation_id), metadata=md
    )
    return [
        (
            attempt.outcome,
            (
                (
                    attempt.usage.prompt_tokens,
                    attempt.usage.completion_tokens,
                    attempt.usage.model_ms,
                )
                if attempt.HasField("usage")
                else None
            ),
        )
        for attempt in shown.attempts
    ]


def _totals(operation: pb.Operation) -> tuple[int, int, int] | None:
    if not operation.HasField("usage"):
        return None
    usage = operation.usage
    return usage.prompt_tokens, usage.completion_tokens, usage.model_ms


def _stored_sums_agree(services: Services) -> None:
    """Every operation's stored totals are the sums over its attempt rows (SQL, per engine)."""
    attempt = OperationAttempt
    sums = (
        select(
            attempt.operation_id.label("operation_id"),
            func.coalesce(func.sum(attempt.prompt_tokens), 0).label("prompt"),
            func.coalesce(func.sum(attempt.completion_tokens), 0).label("completion"),
            func.coalesce(func.sum(attempt.model_ms), 0).label("model_ms"),
        )
        .group_by(attempt.operation_id)
        .subquery()
    )
    op = UserOperation
    compared = select(func.count()).join_from(op, sums, sums.c.operation_id == op.id)
    disagreeing = compared.where(
        (op.prompt_tokens != sums.c.prompt)
        | (op.completion_tokens != sums.c.completion)
        | (op.model_ms != sums.c.model_ms)
    )
    assert scalar(services.db, disagreeing) == 0
    assert scalar(services.db, compared) == scalar(
        services.db, select(func.count()).select_from(op)
    )


def _retry_due(services: Services, clock: ManualClock) -> None:
    clock.advance(4 * RETRY_DELAY + 1)
    assert services.sweep().promoted == 1


def test_the_totals_are_the_sum_over_the_attempts_including_a_retried_one(
    services: Services, ops: OpsClient, clock: ManualClock, operator_md: Metadata
) -> None:
    created = ops.create(ALICE, "k-sum", max_attempts=2, retry_delay_seconds=RETRY_DELAY)
    assert _totals(ops.get(ALICE, created.id)) is None  # nothing spent yet
    first = ops.claim_one()
    failed = _settle(
        ops,
        first,
        _used(300, 40, 1500),
        pb.FailOperationRequest(retryable=True, failure_code="invalid_model_output"),
    )
    assert failed == WAITING_FOR_RETRY
    assert _totals(ops.get(ALICE, created.id)) == (300, 40, 1500)
    _retry_due(services, clock)
    second = ops.claim_one()
    done = _settle(
        ops, second, _used(300, 112, 3100), pb.CompleteOperationRequest(provenance=LOCAL)
    )
    assert done == SUCCEEDED

    owned = ops.get(ALICE, created.id)
    assert _totals(owned) == (600, 152, 4600)
    assert _attempt_usage(services, operator_md, created.id) == [
        ("failed_retryable", (300, 40, 1500)),
        ("succeeded", (300, 112, 3100)),
    ]
    # A list page carries the totals too, read from the operation row alone.
    (listed,) = ops.list_page(ALICE).operations
    assert _totals(listed) == (600, 152, 4600)
    _stored_sums_agree(services)


def test_a_manual_retry_a_release_and_a_cancel_keep_counting(
    services: Services, ops: OpsClient, clock: ManualClock, operator_md: Metadata
) -> None:
    created = ops.create(BOB, "k-more", max_attempts=1)
    released = ops.claim_one()
    # A stopping worker hands the attempt back with what it spent before the stop.
    assert _settle(ops, released, _used(50, 7, 400), pb.ReleaseOperationRequest()) == (QUEUED)
    clock.advance(1)  # the attempts read in order of their start
    failed = ops.claim_one()
    assert (
        _settle(ops, failed, _used(50, 9, 500), pb.FailOperationRequest(failure_code="bad_input"))
        == FAILED
    )
    clock.advance(1)
    assert ops.retry(BOB, created.id).state == QUEUED
    assert _totals(ops.get(BOB, created.id)) == (100, 16, 900)  # the retry keeps the totals
    cancelled = ops.claim_one()
    assert ops.cancel(BOB, created.id).cancel_requested
    ended = _settle(ops, cancelled, _used(50, 3, 100), pb.AcknowledgeCancellationRequest())
    assert ended == CANCELLED
    assert _totals(ops.get(BOB, created.id)) == (150, 19, 1000)
    assert _attempt_usage(services, operator_md, created.id) == [
        ("released", (50, 7, 400)),
        ("failed", (50, 9, 500)),
        ("cancelled", (50, 3, 100)),
    ]
    _stored_sums_agree(services)


def test_a_killed_attempt_that_produced_no_answer_costs_nothing(
    services: Services, ops: OpsClient, clock: ManualClock, operator_md: Metadata
) -> None:
    created = ops.create(ALICE, "k-killed", max_attempts=2, retry_delay_seconds=RETRY_DELAY)
    ops.claim_one(lease_seconds=LEASE_SECONDS)  # its worker is killed: no settlement ever comes
    clock.advance(LEASE_SECONDS + 1)
    assert services.sweep().expired_leases == 1
    assert _attempt_usage(services, operator_md, created.id) == [("expired", None)]
    assert _totals(ops.get(ALICE, created.id)) is None
    _retry_due(services, clock)
    answered = ops.claim_one()
    assert _settle(ops, answered, _used(10, 20, 30), pb.CompleteOperationRequest()) == (SUCCEEDED)
    assert _attempt_usage(services, operator_md, created.id) == [
        ("expired", None),
        ("succeeded", (10, 20, 30)),
    ]
    assert _totals(ops.get(ALICE, created.id)) == (10, 20, 30)
    # A killed worker sends nothing: the expired attempt stays at nothing.
    _stored_sums_agree(services)


def test_a_repeated_settlement_is_counted_once(
    services: Services, ops: OpsClient, operator_md: Metadata
) -> None:
    created = ops.create(ALICE, "k-twice")
    lease = ops.claim_one()
    for _ in range(2):  # the second is the same lease's repeat: answered, not written again
        done = _settle(ops, lease, _used(5, 6, 7), pb.CompleteOperationRequest())
        assert done == SUCCEEDED
    assert _totals(ops.get(ALICE, created.id)) == (5, 6, 7)
    assert _attempt_usage(services, operator_md, created.id) == [("succeeded", (5, 6, 7))]


def test_usage_beyond_its_bounds_is_refused_alone(services: Services, ops: OpsClient) -> None:
    created = ops.create(ALICE, "k-bounds")
    lease = ops.claim_one()
    item = pb.SettleOperationsRequest.Item(
        owner_id=ALICE,
        complete=pb.CompleteOperationRequest(operation_id=lease.id, lease_token=lease.token),
        usage=_used(USAGE_TOKENS_MAX + 1, 0, 0),
    )
    reply: pb.LeaseMutationsResponse = ops.stub.SettleOperations(
        pb.SettleOperationsRequest(items=[item]), metadata=ops.neutral
    )
    (answer,) = reply.outcomes
    assert answer.status_code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "usage.prompt_tokens" in answer.message
    assert ops.get(ALICE, created.id).state == pb.OPERATION_STATE_RUNNING  # nothing written


def test_opsctl_operations_show_lists_the_usage_per_attempt(
    ops: OpsClient, clock: ManualClock, opsctl: Callable[..., tuple[int, str, str]]
) -> None:
    created = ops.create(ALICE, "k-cli", max_attempts=2, retry_delay_seconds=RETRY_DELAY)
    first = ops.claim_one()
    _settle(ops, first, None, pb.FailOperationRequest(retryable=True, failure_code="busy"))
    clock.advance(4 * RETRY_DELAY + 1)
    ops.services.sweep()
    second = ops.claim_one()
    _settle(ops, second, _used(300, 112, 3100), pb.CompleteOperationRequest(provenance=LOCAL))

    code, out, _ = opsctl("show", created.id, "--json")
    assert code == 0
    shown = json.loads(out)
    assert [attempt["usage"] for attempt in shown["attempts"]] == [
        None,
        {"prompt_tokens": 300, "completion_tokens": 112, "model_seconds": 3.1},
    ]
    assert shown["usage"] == {"prompt_tokens": 300, "completion_tokens": 112, "model_seconds": 3.1}
    code, out, _ = opsctl("show", created.id)
    assert code == 0
    lines = out.splitlines()
    header = next(line for line in lines if "OUTCOME" in line)
    assert "TOKENS" in header
    assert "MODEL TIME" in header
    succeeded = next(line for line in lines if line.startswith("  2 "))  # the second attempt
    assert "300+112" in succeeded
    assert "3.1 s" in succeeded
    assert any(line.startswith("usage") and "412 tokens" in line for line in lines)


# ---- the owner's view ----------------------------------------------------------------------

PROVENANCE_JS = Path(durable_ops.gateway.__file__).parent / "web" / "static" / "provenance.js"
# provenance.js as the operations page uses it, on the operation the gateway answered.
USAGE_LINE = """
globalThis.document = { getElementById: () => null };  // tasks.js reads its page at import
const { usageLine } = await import(process.argv[1]);
let input = "";
for await (const chunk of process.stdin) input += chunk;
process.stdout.write(usageLine(JSON.parse(input)));
"""


def _usage_line(operation: dict[str, object]) -> str:
    node = shutil.which("node")
    if node is None:
        pytest.skip("no node to run provenance.js with")
    shown = subprocess.run(
        [node, "--input-type=module", "-e", USAGE_LINE, PROVENANCE_JS.as_uri()],
        input=json.dumps(operation),
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return shown.stdout


def test_the_owners_operation_shows_the_totals(services: Services, ops: OpsClient) -> None:
    created = ops.create(ALICE, "k-dto")
    lease = ops.claim_one()
    _settle(ops, lease, _used(300, 112, 3100), pb.CompleteOperationRequest(provenance=LOCAL))
    untouched = ops.create(ALICE, "k-none")

    async def scenario() -> tuple[dict[str, object], dict[str, object]]:
        async with gateway_client(make_app(services.target)) as client:
            answered = await client.get(f"/api/operations/{created.id}", headers=bearer(ALICE))
            assert answered.status_code == 200
            other = await client.get(f"/api/operations/{untouched.id}", headers=bearer(ALICE))
            return answered.json(), other.json()

    shown, none_yet = asyncio.run(scenario())
    assert shown["usage"] == {"prompt_tokens": 300, "completion_tokens": 112, "model_seconds": 3.1}
    assert none_yet["usage"] is None
    assert _usage_line(shown) == "412 tokens · 3.1 s"  # the model is the result's to name
    assert _usage_line(none_yet) == ""


# ---- the AI worker fills it from the model server ------------------------------------------


def _tokens(task_type: str, route: str, model: str, kind: str) -> float:
    labels = {"task_type": task_type, "route": route, "model": model, "kind": kind}
    return REGISTRY.get_sample_value("durable_ops_model_tokens_total", labels) or 0.0


def _fell_back(ops: OpsClient, key: str, privacy: pb.Privacy.ValueType) -> str:
    """An operation whose local attempt handed it to the external route (spending nothing)."""
    request = ops.create_request(key, task_type="cv.review", subject_type="attachment")
    request.privacy = privacy
    created = ops.create_raw(ALICE, request).operation
    lease = ops.claim_one(("cv.review",))
    fallback = pb.RequestExternalFallbackRequest()
    waiting = _settle(ops, lease, None, fallback)
    assert waiting == pb.OPERATION_STATE_WAITING_FOR_EXTERNAL_FALLBACK
    return str(created.id)


def test_the_ai_worker_records_what_the_model_reported_on_either_route(
    services: Services, operator_md: Metadata
) -> None:
    """A local attempt and an external one each record the dev model's own counts; an owner
    whose privacy forbids the external route spends nothing there."""
    local_model, external_model = ModelServer(), ModelServer()
    ops = OpsClient(services)
    workspace = Workspace()
    before = {
        route: _tokens("cv.review", route, "dev-heuristic", "completion")
        for route in ("local", "external")
    }

    async def scenario() -> dict[str, str]:
        local = ModelClient(local_model.url, "dev-heuristic", route=Route.LOCAL)
        external = ModelClient(external_model.url, "dev-heuristic", route=Route.EXTERNAL)
        router = Router(local, CircuitBreaker(3, 30), external)
        async with executor_on(router, workspace, Journal(), 30) as executor:
            request = ops.create_request("local", task_type="cv.review", subject_type="attachment")
            ids = {"local": str(ops.create_raw(ALICE, request).operation.id)}
            await drain(services, executor, LEASE_SECONDS, [Route.LOCAL])
            ids["external"] = _fell_back(ops, "external", pb.PRIVACY_EXTERNAL_ALLOWED)
            await drain(services, executor, LEASE_SECONDS, [Route.EXTERNAL])
            # Allowed when it fell back; the owner forbids external use before it is served.
            ids["private"] = _fell_back(ops, "private", pb.PRIVACY_EXTERNAL_ALLOWED)
            workspace.settings = AiSettings(True, Privacy.LOCAL_ONLY, Plan.PRO)
            await drain(services, executor, LEASE_SECONDS, [Route.EXTERNAL])
            return ids

    try:
        ids = asyncio.run(scenario())
    finally:
        local_model.stop()
        external_model.stop()

    spent = {}
    for name in ("local", "external"):
        operation = ops.get(ALICE, ids[name])
        assert operation.state == SUCCEEDED, name
        totals = _totals(operation)
        assert totals is not None
        prompt, completion, model_ms = totals
        assert prompt > 0
        assert completion > 0
        assert model_ms >= 0
        spent[name] = totals
    # The same dev model, the same answer: the same tokens (its measured times differ).
    assert spent["local"][:2] == spent["external"][:2]
    # Both attempts started at the same (manual) time: in outcome order.
    assert sorted(_attempt_usage(services, operator_md, ids["external"]), key=str) == [
        ("fallback", None),
        ("succeeded", spent["external"]),
    ]
    for route in ("local", "external"):
        counted = _tokens("cv.review", route, "dev-heuristic", "completion") - before[route]
        assert counted == spent[route][1]

    # The private one: refused before anything was sent, nothing recorded on the route.
    private = ops.get(ALICE, ids["private"])
    assert _totals(private) is None
    assert [usage for _, usage in _attempt_usage(services, operator_md, ids["private"])] == [
        None,
        None,
    ]
    external_attempts = rows(
        services.db,
        select(OperationAttempt).where(
            OperationAttempt.operation_id == ids["private"], OperationAttempt.route == "external"
        ),
    )
    assert [row.prompt_tokens for row in external_attempts] == [None]
    assert external_model.completions == 1  # the permitted one alone


# ---- the worker SDK carries it ---------------------------------------------------------------

SDK_MODEL = Provenance("sdk-test", "tiny-model", "local")


def test_the_sdk_settles_what_a_handler_recorded_a_release_included(
    services: Services, ops: OpsClient, operator_md: Metadata
) -> None:
    """Two calls of a completed attempt are summed; a stopped worker's release carries what
    its handler spent before the stop; each is counted in the metrics once accepted."""
    done = ops.create(ALICE, "k-sdk-done", subject_id="done").id
    stopped = ops.create(BOB, "k-sdk-stopped", subject_id="stopped").id
    started: set[str] = set()
    before = _tokens(TASK, "local", "tiny-model", "prompt")
    worker = Worker(services.target, signing_key(Role.WORKER), WorkerOptions(shutdown_seconds=0.2))

    @worker.handler(TASK)
    async def work(attempt: Attempt) -> None:
        started.add(attempt.subject.id)
        attempt.used(Usage(100, 20, 1000), SDK_MODEL)
        if attempt.subject.id == "done":
            attempt.used(Usage(100, 30, 500), SDK_MODEL)  # a second call of the same attempt
            return
        await asyncio.sleep(60)  # cut short by the stop: released

    async def both_started() -> None:
        while started != {"done", "stopped"} or ops.get(ALICE, done).state != SUCCEEDED:
            await asyncio.sleep(0.01)

    run_until(worker, both_started)
    assert _attempt_usage(services, operator_md, done) == [("succeeded", (200, 50, 1500))]
    assert _attempt_usage(services, operator_md, stopped) == [("released", (100, 20, 1000))]
    assert _totals(ops.get(BOB, stopped)) == (100, 20, 1000)
    assert ops.get(BOB, stopped).state == QUEUED
    assert _tokens(TASK, "local", "tiny-model", "prompt") - before == 300
