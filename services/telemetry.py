"""OpenTelemetry tracing for every process: off unless the standard ``OTEL_*`` variables say so.

The enable rule (``tracing_enabled``), read once when a process starts:

- ``OTEL_SDK_DISABLED=true`` turns it off, whatever else is set;
- else ``OTEL_TRACES_EXPORTER`` decides when set: ``none`` is off, a list of
  ``otlp`` and/or ``console`` is on;
- else it is on exactly when an OTLP endpoint is named
  (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_ENDPOINT``),
  exporting with ``otlp``.

``otlp`` speaks ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` / ``OTEL_EXPORTER_OTLP_PROTOCOL``
(``http/protobuf``, the default, or ``grpc``); the exporters, the batch processor
and the sampler read their own ``OTEL_*`` variables. ``service.name`` is the
process (``gateway``, ``operations``, ``ai-worker``, ...); other resource
attributes come from ``OTEL_RESOURCE_ATTRIBUTES``.

Off, nothing is imported beyond the API, no provider, exporter or
instrumentation is installed, and the helpers below return at once. On,
``configure_tracing`` installs the grpc.aio server and client, SQLAlchemy and
httpx instrumentations (each wraps the library's constructors, so it must run
before the process builds its servers, channels and engines); the gateway adds
the ASGI middleware with ``instrument_app``. The gateway answers every request
with the ``traceparent`` of its server span.

``current_traceparent`` is what admission stores on an operation; the worker
starts its spans with ``span(..., link=stored)``, so they link back to the
request that created the work.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanContext, TraceFlags

from durable_ops.settings import SettingsError

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from starlette.applications import Starlette

# The W3C trace-context header (version 00): what the gateway accepts and returns.
TRACEPARENT = "traceparent"
TRACEPARENT_LENGTH = 55  # "00-" + 32 hex + "-" + 16 hex + "-" + 2 hex
_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_EXPORTERS = frozenset({"otlp", "console"})
_PROTOCOLS = frozenset({"http/protobuf", "grpc"})
_TRACER_NAME = "durable_ops"


def _truthy(raw: str | None) -> bool:
    return (raw or "").strip().lower() in {"1", "true", "yes", "on"}


def _exporter_names(environ: Mapping[str, str]) -> list[str]:
    """The trace exporters the environment asks for; ``[]`` means tracing is off."""
    if _truthy(environ.get("OTEL_SDK_DISABLED")):
        return []
    raw = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if raw:
        names = [name.strip() for name in raw.split(",") if name.strip()]
        if "none" in names:
            return []
        unknown = sorted(set(names) - _EXPORTERS)
        if unknown:
            raise SettingsError(
                f"OTEL_TRACES_EXPORTER must be otlp, console or none, not {', '.join(unknown)}"
            )
        return list(dict.fromkeys(names))
    endpoints = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
    return ["otlp"] if any(environ.get(name, "").strip() for name in endpoints) else []


def tracing_enabled(environ: Mapping[str, str]) -> bool:
    """The enable rule of the module docstring."""
    return bool(_exporter_names(environ))


def check_environment(environ: Mapping[str, str]) -> None:
    """Refuse the ``OTEL_*`` values ``configure_tracing`` would refuse, importing no exporter:
    ``opsctl up`` asks before its children start, each of which would refuse them."""
    if "otlp" in _exporter_names(environ):
        _otlp_protocol(environ)


def _otlp_protocol(environ: Mapping[str, str]) -> str:
    """The OTLP protocol named (the traces' own variable first), refused with its variable."""
    for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        protocol = environ.get(name, "").strip()
        if protocol and protocol not in _PROTOCOLS:
            raise SettingsError(f"{name} must be http/protobuf or grpc, not {protocol!r}")
        if protocol:
            return protocol
    return "http/protobuf"


def otlp_exporter(environ: Mapping[str, str]) -> SpanExporter:
    """The OTLP span exporter of the protocol the environment names (http/protobuf by default)."""
    if _otlp_protocol(environ) == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcExporter,
        )

        return GrpcExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpExporter,
    )

    return HttpExporter()


def _processors(names: list[str], environ: Mapping[str, str]) -> list[SpanProcessor]:
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SimpleSpanProcessor,
    )

    processors: list[SpanProcessor] = []
    for name in names:
        if name == "otlp":
            processors.append(BatchSpanProcessor(otlp_exporter(environ)))
        else:
            processors.append(SimpleSpanProcessor(ConsoleSpanExporter()))
    return processors


@dataclass
class Tracing:
    """What ``configure_tracing`` installed in this process."""

    provider: TracerProvider
    instrumentors: list[Any]
    is_global: bool

    def shutdown(self) -> None:
        """Remove the instrumentations, flush and stop the provider (the SDK flushes at exit)."""
        global _active
        for instrumentor in reversed(self.instrumentors):
            instrumentor.uninstrument()
        from opentelemetry.instrumentation.propagators import set_global_response_propagator

        set_global_response_propagator(None)
        self.provider.shutdown()
        if _active is self:
            _active = None


_active: Tracing | None = None


def active() -> Tracing | None:
    """This process's tracing, or None when it is off."""
    return _active


def configure_tracing(
    process: str,
    environ: Mapping[str, str] | None = None,
    *,
    processors: list[SpanProcessor] | None = None,
    install_global: bool = True,
) -> Tracing | None:
    """Set up tracing for ``process`` if the rule says so (or ``processors`` are given).

    ``processors`` replaces the exporters the environment names (tests pass an
    in-memory one); ``install_global=False`` leaves the API's global provider alone.
    """
    global _active
    env = os.environ if environ is None else environ
    if _active is not None:
        raise RuntimeError("tracing is already configured in this process")
    if processors is None:
        names = _exporter_names(env)
        if not names:
            return None
        processors = _processors(names, env)

    from opentelemetry.instrumentation.grpc import (
        GrpcAioInstrumentorClient,
        GrpcAioInstrumentorServer,
    )
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
    from opentelemetry.instrumentation.propagators import set_global_response_propagator
    from opentelemetry.instrumentation.sqlalchemy import SQLAlchemyInstrumentor
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider

    # Resource.create also reads OTEL_RESOURCE_ATTRIBUTES; the process name wins for
    # service.name so one shared environment still names every process apart.
    resource = Resource.create({SERVICE_NAME: process, "service.namespace": "durable-ops"})
    provider = TracerProvider(resource=resource)
    for processor in processors:
        provider.add_span_processor(processor)
    if install_global:
        trace.set_tracer_provider(provider)
    instrumentors: list[Any] = [
        GrpcAioInstrumentorServer(),
        GrpcAioInstrumentorClient(),
        HTTPXClientInstrumentor(),
    ]
    for instrumentor in instrumentors:
        instrumentor.instrument(tracer_provider=provider)
    sql = SQLAlchemyInstrumentor()
    # skip_dep_check: it declares SQLAlchemy < 2.1 and we run 2.1 (the events it hooks are
    # unchanged). Statements become spans only inside a span: see _InsideSpansOnly.
    sql.instrument(tracer_provider=_InsideSpansOnly(provider), skip_dep_check=True)
    instrumentors.append(sql)
    set_global_response_propagator(_TraceparentResponse())
    _active = Tracing(provider, instrumentors, install_global)
    return _active


class _InsideSpansOnly(trace.TracerProvider):
    """Tracers that start a span only as a child of another one.

    The Operations process polls the database on timers (waiting claims, the
    cancel and done watches, the sweeper): traced as they are, those polls
    would be dozens of one-statement traces a second from an idle stack. A
    statement run for a request (or the worker's work) is a span of its trace.
    """

    def __init__(self, provider: trace.TracerProvider) -> None:
        self._provider = provider

    def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
        return _ChildSpansOnly(self._provider.get_tracer(*args, **kwargs))


class _ChildSpansOnly(trace.Tracer):
    def __init__(self, tracer: trace.Tracer) -> None:
        self._tracer = tracer

    def start_span(
        self, name: str, context: otel_context.Context | None = None, *args: Any, **kwargs: Any
    ) -> Span:
        if not trace.get_current_span(context).get_span_context().is_valid:
            return trace.INVALID_SPAN
        return self._tracer.start_span(name, context, *args, **kwargs)

    # The API types this as its own private context-manager class; a plain one does the same.
    @contextmanager
    def start_as_current_span(  # type: ignore[override]
        self, name: str, context: otel_context.Context | None = None, *args: Any, **kwargs: Any
    ) -> Iterator[Span]:
        if not trace.get_current_span(context).get_span_context().is_valid:
            yield trace.INVALID_SPAN
            return
        with self._tracer.start_as_current_span(name, context, *args, **kwargs) as current:
            yield current


def instrument_app(app: Starlette) -> None:
    """Trace every request of ``app`` (accepting ``traceparent``); nothing when tracing is off."""
    if _active is None:
        return
    from opentelemetry.instrumentation.starlette import StarletteInstrumentor

    StarletteInstrumentor.instrument_app(app, tracer_provider=_active.provider)


def _traceparent_of(span_context: SpanContext) -> str:
    return (
        f"00-{trace.format_trace_id(span_context.trace_id)}-"
        f"{trace.format_span_id(span_context.span_id)}-{span_context.trace_flags:02x}"
    )


def current_traceparent() -> str:
    """The active span as a W3C ``traceparent``, or ``""`` (tracing off, or no span)."""
    if _active is None:
        return ""
    span_context = trace.get_current_span().get_span_context()
    return _traceparent_of(span_context) if span_context.is_valid else ""


def parse_traceparent(value: str) -> SpanContext | None:
    """A stored ``traceparent`` as a remote span context; None when absent or malformed."""
    match = _TRACEPARENT.fullmatch(value.strip())
    if match is None:
        return None
    trace_id, span_id, flags = (int(group, 16) for group in match.groups())
    if trace_id == 0 or span_id == 0:
        return None
    return SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(flags))


def _links(traceparent: str) -> list[Link]:
    linked = parse_traceparent(traceparent) if traceparent else None
    return [Link(linked)] if linked is not None else []


OPERATION_ID = "durable_ops.operation_id"  # the span attribute naming an operation


@contextmanager
def span(
    name: str, *, link: str = "", root: bool = False, operation_id: str = ""
) -> Iterator[Span]:
    """A span named ``name``, current inside the block; linked to ``link`` (a traceparent).

    ``root`` starts a new trace instead of a child of the current span;
    ``operation_id`` is recorded as the ``durable_ops.operation_id`` attribute.
    Off, it yields the API's invalid span at no cost.
    """
    if _active is None:
        yield trace.INVALID_SPAN
        return
    tracer = _active.provider.get_tracer(_TRACER_NAME)
    parent = otel_context.Context() if root else None
    attributes = {OPERATION_ID: operation_id} if operation_id else None
    with tracer.start_as_current_span(
        name, context=parent, links=_links(link), attributes=attributes
    ) as current:
        yield current


def add_link(target: Span, traceparent: str) -> None:
    """Link ``target`` to ``traceparent`` once it is known (a claim learns it from the reply)."""
    linked = parse_traceparent(traceparent) if traceparent and _active is not None else None
    if linked is not None:
        target.add_link(linked)


class _TraceparentResponse:
    """The ASGI middleware's response propagator: ``traceparent`` of the server span."""

    def inject(self, carrier: Any, context: Any = None, setter: Any = None) -> None:
        span_context = trace.get_current_span(context).get_span_context()
        if not span_context.is_valid or setter is None:
            return
        setter.set(carrier, TRACEPARENT, _traceparent_of(span_context))
        setter.set(carrier, "access-control-expose-headers", TRACEPARENT)
