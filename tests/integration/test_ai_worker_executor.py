"""The AI worker (its handler on the worker SDK) against the real Operations service,
on both engines.

Workspace is a stand-in here (the end-to-end tests use the real one); the
model is a real HTTP server; time for leases moves by ``ManualClock`` and for
the circuit breaker by a fake monotonic clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager

import pytest
from prometheus_client import REGISTRY
from sqlalchemy import select
from structlog.testing import capture_logs

from durable_ops.ai_worker.clients import AiSettings
from durable_ops.ai_worker.execution import Executor
from durable_ops.ai_worker.handlers import WorkspaceReader
from durable_ops.ai_worker.inference import ModelClient, Router
from durable_ops.ai_worker.journal import JournalEntry, JournalError
from durable_ops.ai_worker.prompts import SubjectText
from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.model.circuit import CircuitBreaker
from durable_ops.model.errors import NotFound
from durable_ops.model.provenance import Provenance
from durable_ops.model.routing import Route
from durable_ops.model.states import Plan, Privacy
from durable_ops.model.subjects import JOB, SubjectKind
from durable_ops.storage.schema import OperationAttempt
from durable_ops.worker import Attempt
from tests.support.ai_stack import ModelServer
from tests.support.ai_worker import Journal, drain
from tests.support.clock import ManualClock
from tests.support.grpc_services import Services, running_services
from tests.support.operations_client import ALICE, OpsClient
from tests.support.prompts import cv_text, job_text
from tests.support.stored import rows

LEASE_SECONDS = 5
STRATEGY = "strategy.snapshot"
CV_REVIEW = "cv.review"


@pytest.fixture
def services(db_url: str) -> Iterator[Services]:
    with running_services(db_url, ManualClock()) as running:
        yield running


class Workspace:
    """Workspace as the executor sees it: the owner is entitled and allows external routes."""

    def __init__(self) -> None:
        self.settings = AiSettings(True, Privacy.EXTERNAL_ALLOWED, Plan.PRO)
        self.notes: list[str] = []
        self.deleted: set[str] = set()

    async def ai_settings(self, attempt: Attempt) -> AiSettings:
        return self.settings

    def reader(self, attempt: Attempt) -> WorkspaceReader:
        return self

    async def read(self, kind: SubjectKind, subject_id: str) -> SubjectText:
        if subject_id in self.deleted:
            raise NotFound(f"{kind.name} not found", code=f"{kind.name}_not_found")
        if kind is JOB:
            return job_text("Data Engineer", "Globex", "Python and Spark.")
        return cv_text("Built Spark pipelines in Python.")

    async def publish_note(
        self, attempt: Attempt, body_json: str, provenance: Provenance | None
    ) -> tuple[str, bool]:
        self.notes.append(attempt.operation_id)
        return f"note-{len(self.notes)}", True


class CancellingJournal(Journal):
    """The owner cancels once the operation is claimed, before the attempt's first beat."""

    def __init__(self, ops: OpsClient) -> None:
        super().__init__()
        self.ops = ops

    def start(self, entry: JournalEntry) -> None:
        assert self.ops.cancel(ALICE, entry.operation_id).cancel_requested
        super().start(entry)


class Monotonic:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _create(ops: OpsClient, key: str, task_type: str, privacy: pb.Privacy.ValueType) -> str:
    subject_type = "job" if task_type == STRATEGY else "attachment"
    request = ops.create_request(key, task_type=task_type, subject_type=subject_type)
    request.privacy = privacy
    return str(ops.create_raw(ALICE, request).operation.id)


async def _until(condition: Callable[[], bool], timeout: float = 10) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.02)


def _circuit_state() -> float | None:
    return REGISTRY.get_sample_value("durable_ops_ai_local_circuit_state")


@asynccontextmanager
async def executor_on(
    router: Router, workspace: Workspace, journal: Journal, timeout: float
) -> AsyncIterator[Executor]:
    try:
        yield Executor(workspace, router, journal, task_timeout_seconds=timeout)
    finally:
        await router.aclose()


def _local(model: ModelServer, timeout: float = 30) -> ModelClient:
    return ModelClient(model.url, "dev-heuristic", route=Route.LOCAL, timeout_seconds=timeout)


def _drained(
    services: Services,
    model: ModelServer,
    workspace: Workspace,
    journal: Journal,
    *,
    external: ModelServer | None = None,
    failures_to_open: int = 3,
    timeout: float = 30,
) -> None:
    """Run the AI work queued until a claim finds none (on both routes when there is an
    ``external`` model), then stop the model servers."""

    async def scenario() -> None:
        outside = None
        if external is not None:
            outside = ModelClient(external.url, "dev-heuristic", route=Route.EXTERNAL)
        router = Router(_local(model), CircuitBreaker(failures_to_open, 30), outside)
        routes = [Route.LOCAL] if external is None else [Route.LOCAL, Route.EXTERNAL]
        async with executor_on(router, workspace, journal, timeout) as executor:
            await drain(services, executor, LEASE_SECONDS, routes)

    try:
        asyncio.run(scenario())
    finally:
        model.stop()
        if external is not None:
            external.stop()


def test_a_cancel_before_the_first_beat_is_acknowledged_without_inference(
    services: Services,
) -> None:
    model = ModelServer()
    ops = OpsClient(services)
    operation_id = _create(ops, "early", STRATEGY, pb.PRIVACY_LOCAL_ONLY)
    workspace, journal = Workspace(), CancellingJournal(ops)

    _drained(services, model, workspace, journal)
    assert ops.row(operation_id).state == "cancelled"
    assert (model.completions, workspace.notes) == (0, [])


def test_a_slow_model_times_out_and_a_deleted_subject_fails_for_good(services: Services) -> None:
    # Silent for 30 s (the error it then answers never comes in time): the timeout bounds
    # the model's silence, and a model streaming its answer slowly would finish (ADR 64).
    model = ModelServer(fail_mode="500", delay_seconds=30)
    ops = OpsClient(services)
    slow = _create(ops, "slow", STRATEGY, pb.PRIVACY_LOCAL_ONLY)
    workspace, journal = Workspace(), Journal()

    async def scenario() -> None:
        router = Router(_local(model, timeout=1), CircuitBreaker(3, 30))
        async with executor_on(router, workspace, journal, 1) as executor:
            started = asyncio.get_running_loop().time()
            await drain(services, executor, LEASE_SECONDS)
            assert asyncio.get_running_loop().time() - started < 5
            workspace.deleted.add("job-1")
            _create(ops, "deleted", STRATEGY, pb.PRIVACY_LOCAL_ONLY)
            await drain(services, executor, LEASE_SECONDS)

    try:
        asyncio.run(scenario())
    finally:
        model.stop()
    timed_out = ops.row(slow)
    assert (timed_out.state, timed_out.failure_code, timed_out.route) == (
        "waiting_for_retry",
        "model_timeout",
        "local",
    )
    deleted = ops.row(journal.finished[1][0])
    assert (deleted.state, deleted.failure_code, deleted.attempt) == (
        "failed",
        "subject_not_found",
        1,
    )
    assert workspace.notes == []


def test_a_lost_lease_stops_the_work_and_publishes_nothing(services: Services) -> None:
    model = ModelServer(delay_seconds=30)
    ops = OpsClient(services)
    clock = services.clock
    assert isinstance(clock, ManualClock)
    operation_id = _create(ops, "lost", STRATEGY, pb.PRIVACY_LOCAL_ONLY)
    workspace, journal = Workspace(), Journal()

    async def scenario() -> None:
        router = Router(_local(model), CircuitBreaker(3, 30))
        async with executor_on(router, workspace, journal, 60) as executor:
            running = asyncio.create_task(drain(services, executor, LEASE_SECONDS))
            await _until(lambda: model.completions == 1)
            clock.advance(LEASE_SECONDS + 1)
            report = await asyncio.to_thread(services.sweep)
            assert report.expired_leases == 1
            # The next beat (a third of the lease later) learns the lease is gone.
            await asyncio.wait_for(running, timeout=LEASE_SECONDS)

    try:
        asyncio.run(scenario())
    finally:
        model.stop()
    assert workspace.notes == []
    assert journal.finished == [(operation_id, False)]
    row = ops.row(operation_id)
    # The sweeper's verdict stands: the worker that lost the lease reported nothing.
    assert (row.state, row.failure_code, row.attempt) == ("waiting_for_retry", "lease_expired", 1)


def test_the_circuit_opens_falls_back_where_permitted_and_half_opens(services: Services) -> None:
    model = ModelServer(fail_mode="500")
    ops = OpsClient(services)
    workspace, journal, monotonic = Workspace(), Journal(), Monotonic()

    async def scenario() -> dict[str, str]:
        external = ModelClient(model.url, "dev-heuristic", route=Route.EXTERNAL)
        router = Router(_local(model), CircuitBreaker(3, 30), external, clock=monotonic)
        async with executor_on(router, workspace, journal, 10) as executor:

            async def run(
                key: str, privacy: pb.Privacy.ValueType, route: Route = Route.LOCAL
            ) -> str:
                external_claim = route is Route.EXTERNAL
                operation_id = key if external_claim else _create(ops, key, CV_REVIEW, privacy)
                await drain(services, executor, LEASE_SECONDS, [route])
                assert [entry.operation_id for entry in journal.started[-1:]] == [operation_id]
                return operation_id

            ids = {f"down-{n}": await run(f"down-{n}", pb.PRIVACY_LOCAL_ONLY) for n in range(3)}
            assert (_circuit_state(), model.completions) == (2, 3)  # open
            ids["permitted"] = await run("permitted", pb.PRIVACY_EXTERNAL_ALLOWED)
            # Nowhere else to go: it waits for the circuit, its attempt not spent on a refusal.
            private = asyncio.create_task(run("private", pb.PRIVACY_LOCAL_ONLY))
            await asyncio.sleep(1)
            assert not private.done()
            assert model.completions == 3  # an open circuit does not call the model

            monotonic.now += 30
            assert _circuit_state() == 1  # half-open: one trial may go
            model.config.fail_mode = None
            ids["private"] = await private  # the trial
            assert (_circuit_state(), model.completions) == (0, 4)
            ids["healed"] = await run("healed", pb.PRIVACY_LOCAL_ONLY)
            assert (_circuit_state(), model.completions) == (0, 5)
            await run(ids["permitted"], pb.PRIVACY_EXTERNAL_ALLOWED, Route.EXTERNAL)
            return ids

    try:
        ids = asyncio.run(scenario())
    finally:
        model.stop()

    def outcome(name: str) -> tuple[str, str | None, str | None]:
        row = ops.row(ids[name])
        return row.state, row.failure_code, row.route

    for n in range(3):
        assert outcome(f"down-{n}") == ("waiting_for_retry", "model_server_error", "local")
    assert outcome("private") == ("succeeded", None, "local")
    assert ops.row(ids["private"]).attempt == 1
    assert outcome("healed") == ("succeeded", None, "local")
    assert outcome("permitted") == ("succeeded", None, "external")
    assert ops.row(ids["permitted"]).attempt == 1  # the fallback continued the attempt
    assert workspace.notes == [ids["private"], ids["healed"], ids["permitted"]]


@pytest.mark.parametrize(
    ("settings", "code"),
    [
        (AiSettings(False, Privacy.EXTERNAL_ALLOWED, Plan.PRO), "ai_disabled"),
        (AiSettings(True, Privacy.EXTERNAL_ALLOWED, Plan.FREE), "not_entitled"),
    ],
    ids=["ai_switched_off", "pro_taken_away"],
)
def test_an_owner_no_longer_entitled_since_admission_gets_no_inference(
    services: Services, settings: AiSettings, code: str
) -> None:
    """The worker reads the owner's settings live before it runs: an analysis admitted
    while the owner had Pro and AI on, who since switched AI off or lost Pro, fails for
    good under its code, with no model call and no note."""
    model = ModelServer()
    ops = OpsClient(services)
    operation_id = _create(ops, "revoked", STRATEGY, pb.PRIVACY_LOCAL_ONLY)
    workspace, journal = Workspace(), Journal()
    workspace.settings = settings

    _drained(services, model, workspace, journal)
    row = ops.row(operation_id)
    assert (row.state, row.failure_code, row.attempt) == ("failed", code, 1)
    assert (model.completions, workspace.notes) == (0, [])


def test_an_owner_who_chose_local_only_since_admission_is_never_sent_outside(
    services: Services,
) -> None:
    """Admitted while the owner allowed external routes, then switched to local only: the
    stricter of the two holds, so with the local model failing the attempt waits to retry
    on the host and the external model is never called (it fell back there)."""
    model, external_model = ModelServer(fail_mode="500"), ModelServer()
    ops = OpsClient(services)
    operation_id = _create(ops, "private", CV_REVIEW, pb.PRIVACY_EXTERNAL_ALLOWED)
    workspace, journal = Workspace(), Journal()
    workspace.settings = AiSettings(True, Privacy.LOCAL_ONLY, Plan.PRO)

    _drained(services, model, workspace, journal, external=external_model, timeout=10)
    row = ops.row(operation_id)
    assert (row.state, row.failure_code, row.route) == (
        "waiting_for_retry",
        "model_server_error",
        "local",
    )
    assert (model.completions, external_model.completions, workspace.notes) == (1, 0, [])


def _fell_back_to_a_rate_limited_route(
    services: Services, key: str, workspace: Workspace, on_wait: Callable[[float], None]
) -> tuple[str, int, int]:
    """An analysis whose local model fails falls back to the external route, which answers
    429 (the dev model's drill, Retry-After: 1) until ``on_wait`` runs during the router's
    wait (given its seconds): the operation, and how often each model was asked."""
    model, external_model = ModelServer(fail_mode="500"), ModelServer(fail_mode="429")
    ops = OpsClient(services)
    operation_id = _create(ops, key, CV_REVIEW, pb.PRIVACY_EXTERNAL_ALLOWED)

    async def waited(seconds: float) -> None:
        on_wait(seconds)
        external_model.config.fail_mode = None

    async def scenario() -> None:
        external = ModelClient(external_model.url, "dev-heuristic", route=Route.EXTERNAL)
        router = Router(_local(model), CircuitBreaker(3, 30), external, sleep=waited)
        async with executor_on(router, workspace, Journal(), 10) as executor:
            await drain(services, executor, LEASE_SECONDS)
            assert ops.row(operation_id).state == "waiting_for_external_fallback"
            await drain(services, executor, LEASE_SECONDS, [Route.EXTERNAL])

    try:
        asyncio.run(scenario())
    finally:
        model.stop()
        external_model.stop()
    return operation_id, model.completions, external_model.completions


def test_a_rate_limited_external_route_is_waited_out_within_the_attempt(
    services: Services,
) -> None:
    """The 429 lifted while the router waits it out: the attempt it fell back with is
    answered. Before, the 429 ended that attempt ``model_rate_limited``, its wait left to
    the operation's retry delay."""
    workspace = Workspace()
    waits: list[float] = []
    operation_id, local, external = _fell_back_to_a_rate_limited_route(
        services, "limited", workspace, waits.append
    )
    row = OpsClient(services).row(operation_id)
    assert (row.state, row.route, row.attempt) == ("succeeded", "external", 1)
    assert (local, external, waits) == (1, 2, [1.0])
    assert workspace.notes == [operation_id]


def test_an_owner_who_chose_local_only_while_a_rate_limit_was_waited_out_is_not_asked_again(
    services: Services,
) -> None:
    """While the 429's Retry-After was waited out the owner chose local only: asking again
    would send the text outside anew, so the attempt ends there, the external model asked
    once."""
    workspace = Workspace()

    def switched(_seconds: float) -> None:
        workspace.settings = AiSettings(True, Privacy.LOCAL_ONLY, Plan.PRO)

    operation_id, local, external = _fell_back_to_a_rate_limited_route(
        services, "switched", workspace, switched
    )
    row = OpsClient(services).row(operation_id)
    assert (row.state, row.failure_code) == ("waiting_for_retry", "external_route_not_permitted")
    assert (local, external, workspace.notes) == (1, 1, [])


class BrokenJournal(Journal):
    """The host journal fails from the ``fail_from``-th attempt it records."""

    def __init__(self, fail_from: int) -> None:
        super().__init__()
        self.fail_from = fail_from

    def start(self, entry: JournalEntry) -> None:
        if len(self.started) + 1 >= self.fail_from:
            raise JournalError("the host store is read-only")
        super().start(entry)


def test_a_failing_host_journal_gives_the_claim_back_and_stops_the_worker(
    services: Services,
) -> None:
    model = ModelServer()
    ops = OpsClient(services)
    first = _create(ops, "journaled", STRATEGY, pb.PRIVACY_LOCAL_ONLY)
    workspace, journal = Workspace(), BrokenJournal(fail_from=2)

    async def scenario() -> None:
        router = Router(_local(model), CircuitBreaker(3, 30))
        async with executor_on(router, workspace, journal, 30) as executor:
            await drain(services, executor, LEASE_SECONDS)
            more = [_create(ops, key, STRATEGY, pb.PRIVACY_LOCAL_ONLY) for key in ("b", "c")]
            with pytest.raises(JournalError):
                await drain(services, executor, LEASE_SECONDS)
            # One was claimed (the clock stands still: either) and given back at once.
            given_back = [ops.row(operation_id) for operation_id in more]
            assert sorted((row.state, row.failure_code) for row in given_back) == [
                ("queued", None),
                ("waiting_for_retry", "host_store_error"),
            ]

    try:
        asyncio.run(scenario())
    finally:
        model.stop()
    assert journal.finished == [(first, True)]
    assert model.completions == 1  # nothing ran unrecorded
    # The worker stopped at once: the third operation waits for another worker.
    assert ops.state_counts() == {"succeeded": 1, "waiting_for_retry": 1, "queued": 1}


class RefusingPublish(Workspace):
    """The subject is deleted once the model has answered: Workspace refuses the note."""

    async def publish_note(
        self, attempt: Attempt, body_json: str, provenance: Provenance | None
    ) -> tuple[str, bool]:
        raise NotFound("job not found", code="job_not_found")


def test_a_note_refused_after_the_answer_still_names_the_model_that_answered(
    services: Services,
) -> None:
    """The operator reads on the failed attempt which model spent the tokens, although no
    note came of them."""
    model = ModelServer()
    ops = OpsClient(services)
    operation_id = _create(ops, "refused", STRATEGY, pb.PRIVACY_LOCAL_ONLY)

    _drained(services, model, RefusingPublish(), Journal())
    row = ops.row(operation_id)
    assert (row.state, row.failure_code) == ("failed", "subject_not_found")
    (attempt,) = rows(
        services.db, select(OperationAttempt).where(OperationAttempt.operation_id == operation_id)
    )
    assert (attempt.outcome, attempt.provider, attempt.model) == (
        "failed",
        "127.0.0.1",
        "dev-heuristic",
    )
    assert attempt.completion_tokens


def test_a_task_off_the_external_allowlist_never_leaves_the_host(services: Services) -> None:
    """The owner allows external routes, but the task is not on the allowlist: with the
    local model down the attempt waits to retry on the host; the external one is not used."""
    model, external_model = ModelServer(fail_mode="500"), ModelServer()
    ops = OpsClient(services)
    operation_id = _create(ops, "host-only", STRATEGY, pb.PRIVACY_EXTERNAL_ALLOWED)
    workspace, journal = Workspace(), Journal()

    _drained(
        services, model, workspace, journal, external=external_model, timeout=10, failures_to_open=1
    )
    row = ops.row(operation_id)
    assert (row.state, row.failure_code, row.route) == (
        "waiting_for_retry",
        "model_server_error",
        "local",
    )
    assert (external_model.completions, workspace.notes) == (0, [])


class ReadsRecorded(Workspace):
    def __init__(self) -> None:
        super().__init__()
        self.reads: list[tuple[str, str]] = []

    async def read(self, kind: SubjectKind, subject_id: str) -> SubjectText:
        self.reads.append((kind.name, subject_id))
        return await super().read(kind, subject_id)


def test_the_operations_context_is_read_for_the_model(services: Services) -> None:
    """A CV review against a job posting reads the posting too, by its reference."""
    model = ModelServer()
    ops = OpsClient(services)
    request = ops.create_request("with-posting", task_type=CV_REVIEW, subject_type="attachment")
    request.context_ref = "job-7"
    operation_id = str(ops.create_raw(ALICE, request).operation.id)
    workspace = ReadsRecorded()

    _drained(services, model, workspace, Journal())
    assert ops.row(operation_id).state == "succeeded"
    assert workspace.reads == [("attachment", "job-1"), ("job", "job-7")]


class Republished(Workspace):
    """A note an earlier attempt of the operation already published."""

    async def publish_note(
        self, attempt: Attempt, body_json: str, provenance: Provenance | None
    ) -> tuple[str, bool]:
        return "note-earlier", False


def test_a_note_found_published_is_logged_as_not_new(services: Services) -> None:
    model = ModelServer()
    ops = OpsClient(services)
    operation_id = _create(ops, "again", STRATEGY, pb.PRIVACY_LOCAL_ONLY)

    with capture_logs() as logs:
        _drained(services, model, Republished(), Journal())
    assert (ops.row(operation_id).state, ops.row(operation_id).result_ref) == (
        "succeeded",
        "note-earlier",
    )
    succeeded = [log for log in logs if log["event"] == "operation_succeeded"]
    assert [(log["note_id"], log["new_note"]) for log in succeeded] == [("note-earlier", False)]
