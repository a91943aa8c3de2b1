"""The tracing enable rule, the stored traceparent's shape, and trace ids in log events."""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.trace import TracerProvider

from durable_ops import telemetry
from durable_ops.logs import add_trace_ids
from durable_ops.model import bounds
from durable_ops.model.errors import InvalidArgument
from durable_ops.settings import SettingsError

ENDPOINT = "http://127.0.0.1:4318"
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.mark.parametrize(
    ("environ", "enabled"),
    [
        ({}, False),
        ({"OTEL_SERVICE_NAME": "x", "OTEL_RESOURCE_ATTRIBUTES": "a=b"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{ENDPOINT}/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "  "}, False),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, True),  # the exporter's default endpoint
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "otlp,console"}, True),
        ({"OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT}, False),
        ({"OTEL_TRACES_EXPORTER": " NONE "}, False),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, False),
        ({"OTEL_SDK_DISABLED": "false", "OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT}, True),
    ],
)
def test_the_enable_rule(environ: dict[str, str], enabled: bool) -> None:
    assert telemetry.tracing_enabled(environ) is enabled


def test_an_unknown_exporter_is_a_settings_error() -> None:
    with pytest.raises(SettingsError, match="OTEL_TRACES_EXPORTER"):
        telemetry.tracing_enabled({"OTEL_TRACES_EXPORTER": "jaeger"})


@pytest.mark.parametrize(
    ("environ", "exporter"),
    [
        ({}, HttpExporter),
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, HttpExporter),
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, GrpcExporter),
        (
            {
                "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
            },
            HttpExporter,
        ),
    ],
)
def test_otlp_speaks_the_protocol_named(environ: dict[str, str], exporter: type) -> None:
    made = telemetry.otlp_exporter(environ)  # builds only: nothing is sent
    try:
        assert isinstance(made, exporter)
    finally:
        made.shutdown()


def test_an_unsupported_protocol_is_a_settings_error() -> None:
    with pytest.raises(SettingsError, match="http/protobuf or grpc"):
        telemetry.otlp_exporter({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})


@pytest.mark.parametrize(
    ("environ", "named"),
    [
        ({"OTEL_TRACES_EXPORTER": "jaeger"}, "OTEL_TRACES_EXPORTER"),
        (
            {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ),
        (
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json",
            },
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        ),
    ],
)
def test_what_configure_tracing_would_refuse_is_refused_without_it(
    environ: dict[str, str], named: str
) -> None:
    """``opsctl up`` asks this before its children start (each would refuse the value)."""
    with pytest.raises(SettingsError, match=f"^{named} must be"):
        telemetry.check_environment(environ)
    assert telemetry.active() is None


def test_a_protocol_tracing_does_not_use_is_not_checked() -> None:
    telemetry.check_environment({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})  # tracing off
    telemetry.check_environment(
        {"OTEL_TRACES_EXPORTER": "console", "OTEL_EXPORTER_OTLP_PROTOCOL": "x"}
    )


def test_off_configures_nothing() -> None:
    assert telemetry.configure_tracing("gateway", environ={"OTEL_TRACES_EXPORTER": "none"}) is None
    assert telemetry.active() is None
    assert telemetry.current_traceparent() == ""


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        (TRACEPARENT, True),
        ("", False),
        ("00-00000000000000000000000000000000-00f067aa0ba902b7-01", False),
        ("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", False),
        ("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", False),
        ("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", False),
        (TRACEPARENT + "-extra", False),
    ],
)
def test_a_stored_traceparent_is_parsed_strictly(value: str, valid: bool) -> None:
    parsed = telemetry.parse_traceparent(value)
    assert (parsed is not None) is valid
    if parsed is not None:
        assert trace.format_trace_id(parsed.trace_id) == "4bf92f3577b34da6a3ce929d0e0e4736"
        assert parsed.is_remote


def test_the_stored_column_takes_only_a_traceparent() -> None:
    assert bounds.trace_parent(TRACEPARENT) == TRACEPARENT
    assert bounds.trace_parent("") == ""
    assert len(TRACEPARENT) == bounds.TRACE_PARENT_MAX == telemetry.TRACEPARENT_LENGTH
    for bad in ("a job description", TRACEPARENT[:-1], TRACEPARENT + "0"):
        with pytest.raises(InvalidArgument):
            bounds.trace_parent(bad)


def test_log_events_carry_the_active_span_ids() -> None:
    assert add_trace_ids(None, "info", {"event": "x"}) == {"event": "x"}
    tracer = TracerProvider().get_tracer(__name__)  # a local provider: the global stays unset
    with tracer.start_as_current_span("work") as span:
        fields = add_trace_ids(None, "info", {"event": "x"})
    context = span.get_span_context()
    assert fields == {
        "event": "x",
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
    }
