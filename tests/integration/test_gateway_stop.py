"""A gateway process told to stop (SIGTERM) ends its event streams and long-polls at once
and exits, however many tabs hold a stream open.

Before, uvicorn closed the port and then waited for every open connection: a
stopped gateway stayed alive, refusing everyone, until the last tab closed its
stream (65 s in the report), and ``opsctl up`` restarts a gateway only once it
has exited. A stream ends cleanly, so the browser's EventSource reconnects (to
the gateway that replaces this one); a long-poll answers as at its timeout.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from durable_ops.model.scope import Role
from tests.support.gateway import JWT_SECRET, bearer, create_operation
from tests.support.grpc_services import Services
from tests.support.keys import key_env
from tests.support.ports import free_port

# Generous, for a busy machine: the stop takes a few tenths of a second. Without the fix
# the process outlived any bound, and the long-poll its whole 30 s.
STOPPED_WITHIN_SECONDS = 5.0
STARTED_WITHIN_SECONDS = 20.0


@pytest.fixture
def services(sqlite_services: Services) -> Services:
    """One engine is enough: the stop is the gateway's own."""
    return sqlite_services


def _start_gateway(services: Services, bind: str) -> subprocess.Popen[str]:
    environment = {
        **os.environ,
        "OPS_GATEWAY_BIND": bind,
        "OPS_OPERATIONS_TARGET": services.target,
        "OPS_NOTIFICATIONS_TARGET": services.target,
        "OPS_WORKSPACE_TARGET": services.target,
        "OPS_AI_ADMISSION_TARGET": services.target,
        **key_env(Role.GATEWAY),
        "OPS_JWT_SECRET": JWT_SECRET,
        "OPS_LOG_JSON": "true",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "durable_ops.cli", "serve", "gateway"],
        env=environment,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + STARTED_WITHIN_SECONDS
    while True:
        try:
            if httpx.get(f"http://{bind}/readyz", timeout=1).status_code == 200:
                return process
        except httpx.TransportError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            _out, errors = process.communicate()
            raise AssertionError(f"the gateway did not start: {errors}")
        time.sleep(0.1)


class Background:
    """A call run in a thread: what it answered or raised, and when it ended."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self.answer: Any = None
        self.error: Exception | None = None
        self.ended_at: float | None = None
        self._thread = threading.Thread(target=self._run, args=(call,), daemon=True)
        self._thread.start()

    def _run(self, call: Callable[[], Any]) -> None:
        try:
            self.answer = call()
        except Exception as exc:  # the test reports it
            self.error = exc
        self.ended_at = time.monotonic()

    def join(self, seconds: float) -> None:
        self._thread.join(seconds)


def _read_stream(url: str) -> list[str]:
    """Every line of the event stream until it ends; a stream cut off mid-way raises."""
    with httpx.stream("GET", url, headers=bearer("alice"), timeout=60) as response:
        assert response.status_code == 200, response.read()
        return list(response.iter_lines())


def _until_held(services: Services, count: int) -> None:
    """Until the gateway's key holds ``count`` long-lived calls: each stream's watch and
    each long-poll's wait have reached the service."""
    deadline = time.monotonic() + STARTED_WITHIN_SECONDS
    while services.open_calls.held("gateway") != count:
        held = services.open_calls.held("gateway")
        assert time.monotonic() < deadline, f"the gateway holds {held} calls, not {count}"
        time.sleep(0.02)


def test_sigterm_ends_open_streams_and_long_polls_and_the_gateway_exits(
    services: Services,
) -> None:
    operation = create_operation(services, "alice")  # queued: no worker takes it
    bind = f"127.0.0.1:{free_port()}"
    gateway = _start_gateway(services, bind)
    try:
        streams = [Background(lambda: _read_stream(f"http://{bind}/api/events")) for _ in "ab"]
        wait_url = f"http://{bind}/api/operations/{operation.id}:wait?timeout=30"
        waiting = Background(lambda: httpx.get(wait_url, headers=bearer("alice"), timeout=60))
        _until_held(services, 3)

        stopped_at = time.monotonic()
        gateway.send_signal(signal.SIGTERM)
        try:
            _out, errors = gateway.communicate(timeout=STOPPED_WITHIN_SECONDS)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"the gateway was still running {STOPPED_WITHIN_SECONDS:g} s after SIGTERM"
            ) from None
        # uvicorn stops gracefully, then raises SIGTERM again to exit with it.
        assert gateway.returncode in (0, -signal.SIGTERM), errors
        for call in (*streams, waiting):
            call.join(STOPPED_WITHIN_SECONDS)
            assert call.ended_at is not None, "a stream or long-poll outlived the stop"
            assert call.ended_at - stopped_at < STOPPED_WITHIN_SECONDS
    finally:
        if gateway.poll() is None:
            gateway.kill()
            gateway.communicate()

    # Each stream ended whole (a chunked body cut off raises): the browser reconnects.
    for stream in streams:
        assert stream.error is None, stream.error
        assert stream.answer[0] == "retry: 2000"
    # The long-poll answered as at its timeout: the operation as it is, look again soon.
    assert waiting.error is None, waiting.error
    answer: httpx.Response = waiting.answer
    assert answer.status_code == 200, answer.text
    assert answer.json()["id"] == operation.id
    assert answer.json()["state"] == "queued"
    assert answer.headers["retry-after"] == "1"
    # Nothing of the gateway's is left open at the service (its stop waits for none).
    _until_held(services, 0)
    events = [json.loads(line)["event"] for line in errors.splitlines() if line.strip()]
    assert events.index("gateway_stopping") < events.index("gateway_stopped")
    assert "Traceback" not in errors
