"""The whole product as a user starts it: ``opsctl up`` on free loopback ports."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.support.ports import free_port

STARTUP_SECONDS = 90


@dataclass
class Product:
    process: subprocess.Popen[str]
    url: str  # the gateway, with a trailing slash
    login: str  # the sign-in page `opsctl up` prints
    lines: list[str] = field(default_factory=list)

    @property
    def records(self) -> list[dict[str, Any]]:
        """Every line so far; off a terminal, `opsctl up` prints one JSON object per line."""
        return [json.loads(line) for line in list(self.lines)]

    def sign_in(self, client: httpx.Client, user: str = "demo") -> httpx.Response:
        """What the page's dev-login form sends (a same-origin POST), followed to /operations."""
        origin = self.url.rstrip("/")
        return client.post(
            f"{origin}/auth/dev-login",
            data={"user": user},
            headers={"Origin": origin},
            follow_redirects=True,
        )

    def events(self, event: str) -> list[dict[str, Any]]:
        return [record for record in self.records if record.get("event") == event]

    def stop(self, signum: signal.Signals = signal.SIGINT) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signum)
        return self.process.wait(timeout=30)


def product_env(**overrides: str) -> dict[str, str]:
    """Every bind and target on a free port, the dev model on one too, no host store."""
    ports = {name: free_port() for name in ("gateway", "ops", "notes", "admit", "ws", "model")}
    env = {
        **os.environ,
        "OPS_GATEWAY_BIND": f"127.0.0.1:{ports['gateway']}",
        "OPS_OPERATIONS_BIND": f"127.0.0.1:{ports['ops']}",
        "OPS_OPERATIONS_TARGET": f"127.0.0.1:{ports['ops']}",
        "OPS_NOTIFICATIONS_BIND": f"127.0.0.1:{ports['notes']}",
        "OPS_NOTIFICATIONS_TARGET": f"127.0.0.1:{ports['notes']}",
        "OPS_AI_ADMISSION_BIND": f"127.0.0.1:{ports['admit']}",
        "OPS_AI_ADMISSION_TARGET": f"127.0.0.1:{ports['admit']}",
        "OPS_WORKSPACE_BIND": f"127.0.0.1:{ports['ws']}",
        "OPS_WORKSPACE_TARGET": f"127.0.0.1:{ports['ws']}",
        "OPS_DEV_MODEL_BIND": f"127.0.0.1:{ports['model']}",
        "OPS_AI_LOCAL_URL": f"http://127.0.0.1:{ports['model']}/v1",
        "OPS_HOST_STORE_DIR": "",
    }
    env.update(overrides)
    return env


@contextmanager
def opsctl_up(
    database_url: str, env: Mapping[str, str], cwd: Path, *args: str
) -> Iterator[Product]:
    """Run ``opsctl up`` in ``cwd`` (its var/ holds the kept secrets) until it prints its
    sign-in line; SIGINT it on exit."""
    process = subprocess.Popen(
        [sys.executable, "-m", "durable_ops.cli", "up", "--database-url", database_url, *args],
        env=dict(env),
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    signed_in: dict[str, Any] = {}
    ready = threading.Event()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line)
            record = json.loads(line)
            if record.get("event") in {"stack_up", "sign_in"}:
                signed_in[record["event"]] = record["url"]
            if record.get("event") == "sign_in":
                ready.set()
        ready.set()  # it exited: no need to wait out the start-up time

    threading.Thread(target=read, daemon=True).start()
    try:
        ready.wait(STARTUP_SECONDS)
        assert "sign_in" in signed_in, "".join(lines[-40:])
        yield Product(process, signed_in["stack_up"], signed_in["sign_in"], lines)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            process.wait(timeout=30)
