"""docs/tracing.md's command, run for real: a process started with an OTLP endpoint sends spans.

A stand-in collector (OTLP/HTTP, decoded with the OpenTelemetry protobufs)
listens on a free loopback port; ``opsctl serve gateway`` is started with
``OTEL_EXPORTER_OTLP_ENDPOINT`` pointing at it, as the doc says.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from durable_ops.model.scope import Role
from tests.support.keys import key_env
from tests.support.ports import free_port

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
# (service.name, span name, trace id, request path) of every span received.
Received = list[tuple[str, str, str, str]]


class _Collector(BaseHTTPRequestHandler):
    received: Received

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        request = ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            service = next(
                (
                    attribute.value.string_value
                    for attribute in resource_spans.resource.attributes
                    if attribute.key == "service.name"
                ),
                "",
            )
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.received.append((service, span.name, span.trace_id.hex(), self.path))
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: object) -> None:
        return None


@pytest.fixture
def collector() -> Iterator[tuple[str, Received]]:
    received: Received = []
    handler = type("Collector", (_Collector,), {"received": received})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()


def test_the_gateway_sends_its_request_spans_to_the_otlp_endpoint(
    collector: tuple[str, Received], tmp_path: Path
) -> None:
    endpoint, received = collector
    bind = f"127.0.0.1:{free_port()}"
    env = {
        **os.environ,
        "OPS_GATEWAY_BIND": bind,
        "OPS_LOG_JSON": "true",
        **key_env(Role.GATEWAY),  # its own key: it signs every call to the services
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    for name in ("OTEL_TRACES_EXPORTER", "OTEL_SDK_DISABLED", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        env.pop(name, None)
    process = subprocess.Popen(
        [sys.executable, "-m", "durable_ops.cli", "serve", "gateway"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        answered = None
        deadline = time.monotonic() + 30
        while answered is None and time.monotonic() < deadline and process.poll() is None:
            try:
                answered = httpx.get(
                    f"http://{bind}/healthz", headers={"traceparent": TRACEPARENT}, timeout=2
                )
            except httpx.TransportError:
                time.sleep(0.1)
        assert answered is not None, "the gateway did not start"
        assert answered.status_code == 200
        assert answered.headers["traceparent"].startswith(f"00-{TRACE_ID}-")
        wanted = ("gateway", "GET /healthz", TRACE_ID, "/v1/traces")
        while wanted not in received and time.monotonic() < deadline:
            time.sleep(0.1)
        assert wanted in received, received
    finally:
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=30)
    assert "Traceback" not in stderr, stderr
