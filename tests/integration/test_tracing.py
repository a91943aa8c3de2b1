"""One OpenTelemetry trace per request, and the worker's spans linked to it, on both engines.

The whole stack runs in this process (every gRPC service, the gateway app, the
real worker's claim and executor, a real model server over HTTP) with the
SDK's in-memory exporter, so the test reads back every span each piece made.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from sqlalchemy import select

from durable_ops import telemetry
from durable_ops.ai_worker.clients import WorkspaceClient
from durable_ops.ai_worker.execution import Executor
from durable_ops.ai_worker.inference import ModelClient, Router
from durable_ops.ai_worker.journal import NullJournal
from durable_ops.api.operations.v1 import operations_pb2 as ops_pb
from durable_ops.api.operations.v1 import operations_pb2_grpc as ops_grpc
from durable_ops.model.circuit import CircuitBreaker
from durable_ops.model.routing import Route
from durable_ops.model.scope import Role
from durable_ops.rpc.client import ServiceCaller, open_channel
from durable_ops.storage.schema import UserOperation
from tests.support.ai_stack import ModelServer
from tests.support.ai_worker import drain
from tests.support.clock import ManualClock
from tests.support.gateway import bearer, gateway_client, make_app, run
from tests.support.grpc_services import Services, running_services
from tests.support.keys import signing_key
from tests.support.stored import scalar
from tests.support.workspace_client import entitle

JOB = {"title": "Engineer", "company": "Acme", "description": "Python, Spark and SQL."}
CV = {"kind": "cv", "filename": "cv.txt", "text": "Built Spark pipelines in Python."}
LEASE_SECONDS = 30
# What the browser (or a proxy in front of the gateway) sends: the request joins this trace.
CALLER_TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_TRACEPARENT = f"00-{CALLER_TRACE_ID}-00f067aa0ba902b7-01"
ADMIT = "/durable_ops.api.ai_admission.v1.AiAdmissionService/Admit"
WORKER_SPANS = {"ai_worker.claim", "ai_worker.execute", "ai_worker.inference", "ai_worker.complete"}


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    """Tracing on for this process, into memory, before any server, channel or engine exists."""
    spans = InMemorySpanExporter()
    tracing = telemetry.configure_tracing(
        "durable-ops-test",
        environ={},
        processors=[SimpleSpanProcessor(spans)],
        install_global=False,
    )
    assert tracing is not None
    try:
        yield spans
    finally:
        tracing.shutdown()


@pytest.fixture
def services(exporter: InMemorySpanExporter, db_url: str) -> Iterator[Services]:
    with running_services(db_url, ManualClock()) as running:
        yield running


def _trace_id(span: ReadableSpan) -> str:
    assert span.context is not None
    return trace.format_trace_id(span.context.trace_id)


def _scope(span: ReadableSpan) -> str:
    return span.instrumentation_scope.name if span.instrumentation_scope else ""


def _statement(span: ReadableSpan) -> object:
    attributes = span.attributes or {}
    # The instrumentation's old and new semantic-convention names for the SQL text.
    return attributes.get("db.statement") or attributes.get("db.query.text")


def _stored_trace_parent(services: Services, operation_id: str) -> str | None:
    query = select(UserOperation.trace_parent).where(UserOperation.id == operation_id)
    found: str | None = scalar(services.db, query)
    return found


async def _post_snapshot(services: Services, exporter: InMemorySpanExporter) -> tuple[str, str]:
    """POST the snapshot in the caller's trace; returns (operation id, response traceparent)."""
    async with gateway_client(make_app(services.target)) as client:
        job = (await client.post("/api/jobs", json=JOB, headers=bearer("alice"))).json()["id"]
        cv = (await client.post("/api/attachments", json=CV, headers=bearer("alice"))).json()["id"]
        exporter.clear()
        headers = {**bearer("alice"), "traceparent": CALLER_TRACEPARENT}
        started = await client.post(
            f"/api/jobs/{job}/strategy-snapshot", json={"attachment_id": cv}, headers=headers
        )
        assert started.status_code == 202, started.text
        return str(started.json()["operation_id"]), started.headers["traceparent"]


async def _work_it(services: Services, model: ModelServer) -> None:
    """The real worker (on the SDK), against the real services and a real model."""
    caller = ServiceCaller(signing_key(Role.WORKER))
    channel = open_channel(services.target, None)
    router = Router(
        ModelClient(model.url, "dev-heuristic", route=Route.LOCAL, timeout_seconds=30),
        CircuitBreaker(3, 30),
    )
    executor = Executor(
        WorkspaceClient(channel, caller), router, NullJournal(), task_timeout_seconds=30
    )
    try:
        await drain(services, executor, LEASE_SECONDS)
    finally:
        await router.aclose()
        await channel.close()


def test_one_request_is_one_trace_and_the_worker_links_to_it(
    services: Services, exporter: InMemorySpanExporter
) -> None:
    entitle(services.db, "alice")
    operation_id, answered = run(_post_snapshot(services, exporter))
    request_spans = exporter.get_finished_spans()

    # The gateway joined the caller's trace and answers with its own span in it.
    assert answered.startswith(f"00-{CALLER_TRACE_ID}-")
    traced = [span for span in request_spans if _trace_id(span) == CALLER_TRACE_ID]
    gateway = [s for s in traced if s.kind is SpanKind.SERVER and "strategy-snapshot" in s.name]
    assert [span.name for span in gateway] == ["POST /api/jobs/{id}/strategy-snapshot"]
    server = gateway[0].context
    assert server is not None
    assert answered == f"00-{CALLER_TRACE_ID}-{trace.format_span_id(server.span_id)}-01"
    # The admission call, both sides, and its SQL statements: all in that one trace.
    assert {(s.name, s.kind) for s in traced if s.name == ADMIT} == {
        (ADMIT, SpanKind.CLIENT),
        (ADMIT, SpanKind.SERVER),
    }
    sql = [s for s in traced if _scope(s) == "opentelemetry.instrumentation.sqlalchemy"]
    statements = [str(_statement(s)) for s in sql]
    assert any(text.startswith("INSERT INTO user_operations") for text in statements), statements
    # Every span the request made is in it: no orphan trace for a piece of the request.
    request_traces = {
        _trace_id(s) for s in request_spans if s.name == ADMIT or "strategy-snapshot" in s.name
    }
    assert request_traces == {CALLER_TRACE_ID}

    # The operation keeps the admitting request's context (ids only, bounded).
    stored = _stored_trace_parent(services, operation_id)
    assert stored is not None
    assert len(stored) == 55
    assert stored.startswith(f"00-{CALLER_TRACE_ID}-")

    exporter.clear()
    model = ModelServer()
    try:
        run(_work_it(services, model))
    finally:
        model.stop()
    worker_spans = [
        span
        for span in exporter.get_finished_spans()
        if span.name in WORKER_SPANS
        and (span.attributes or {}).get(telemetry.OPERATION_ID) == operation_id
    ]
    assert {span.name for span in worker_spans} == WORKER_SPANS
    for span in worker_spans:
        # Linked to the admitting request, not a child of it: the work is its own trace.
        assert [trace.format_trace_id(link.context.trace_id) for link in span.links] == [
            CALLER_TRACE_ID
        ], span.name
        assert _trace_id(span) != CALLER_TRACE_ID
    # SQL outside any span (entitle() above, the service's background polls) made no trace.
    everything = [*request_spans, *exporter.get_finished_spans()]
    orphans = [
        s.name
        for s in everything
        if _scope(s) == "opentelemetry.instrumentation.sqlalchemy" and s.parent is None
    ]
    assert orphans == []
    # The model call is an HTTP client span inside the worker's trace.
    execute = next(span for span in worker_spans if span.name == "ai_worker.execute")
    http = [
        span
        for span in exporter.get_finished_spans()
        if _scope(span) == "opentelemetry.instrumentation.httpx"
        and _trace_id(span) == _trace_id(execute)
    ]
    assert http, "the model request was not traced"
    state = scalar(services.db, select(UserOperation.state).where(UserOperation.id == operation_id))
    assert state == "succeeded"


def test_create_operation_keeps_the_callers_trace_and_a_repeat_is_the_same_request(
    services: Services,
) -> None:
    """CreateOperation stores the traceparent it was called in; the trace is no part of the
    request's fingerprint, so the same create from another trace is the same operation."""
    caller = ServiceCaller(signing_key(Role.GATEWAY))
    request = ops_pb.CreateOperationRequest(
        task_type="demo.task",
        idempotency_key="traced-create",
        subject=ops_pb.Subject(type="job", id="job-1"),
        max_attempts=3,
        retry_delay_seconds=30,
    )

    async def create() -> tuple[str, bool, str]:
        channel = open_channel(services.target, None)
        try:
            stub = ops_grpc.OperationsServiceStub(channel)
            with telemetry.span("caller", root=True) as span:
                reply = await stub.CreateOperation(request, metadata=caller.metadata("alice"))
            trace_id = trace.format_trace_id(span.get_span_context().trace_id)
            return reply.operation.id, reply.created, trace_id
        finally:
            await channel.close()

    first, created, first_trace = run(create())
    again, created_again, second_trace = run(create())
    assert (created, created_again) == (True, False)
    assert again == first
    assert first_trace != second_trace
    stored = _stored_trace_parent(services, first)
    assert stored is not None
    assert stored.startswith(f"00-{first_trace}-")


def test_with_tracing_off_nothing_is_installed(db_url: str) -> None:
    """No OTEL_* variables: no provider, no exporter, no instrumentation, nothing stored."""
    assert telemetry.configure_tracing("gateway", environ={}) is None
    assert telemetry.active() is None
    assert not isinstance(trace.get_tracer_provider(), SdkTracerProvider)
    with running_services(db_url, ManualClock()) as services:
        entitle(services.db, "alice")
        app = make_app(services.target)
        installed: list[object] = [middleware.cls for middleware in app.user_middleware]
        assert OpenTelemetryMiddleware not in installed

        async def scenario() -> tuple[str, bool]:
            async with gateway_client(app) as client:
                job = await client.post("/api/jobs", json=JOB, headers=bearer("alice"))
                cv = await client.post("/api/attachments", json=CV, headers=bearer("alice"))
                headers = {**bearer("alice"), "traceparent": CALLER_TRACEPARENT}
                started = await client.post(
                    f"/api/jobs/{job.json()['id']}/strategy-snapshot",
                    json={"attachment_id": cv.json()["id"]},
                    headers=headers,
                )
                assert started.status_code == 202
                return str(started.json()["operation_id"]), "traceparent" in started.headers

        operation_id, answered = run(scenario())
        assert not answered
        assert _stored_trace_parent(services, operation_id) is None
    with telemetry.span("ai_worker.execute", link=CALLER_TRACEPARENT) as span:
        assert span is trace.INVALID_SPAN
