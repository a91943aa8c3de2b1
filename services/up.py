"""``opsctl up``: every process of the product as children of one command.

``Stack`` starts ``opsctl serve X`` children with a shared environment,
prefixes each line they print with its name, waits until each answers its
health check, and stops them all (SIGTERM, then SIGKILL after a grace
period) when asked, when signalled, or when any child dies. End-to-end tests
use the same class with their own ports and database.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import IO

import grpc
import httpx
from grpc_health.v1 import health_pb2, health_pb2_grpc

from durable_ops.settings import Settings

STOP_GRACE_SECONDS = 10.0
HEALTH_TIMEOUT_SECONDS = 60.0
# How long the development model takes per answer under `opsctl up` unless
# OPS_DEV_MODEL_SECONDS is set: slow enough to watch an operation's progress
# climb in the UI, quick enough not to be a wait (`opsctl serve dev-model` and
# the tests default to 0).
UP_DEV_MODEL_SECONDS = 4.0
DEFAULT_PROCESSES = (
    "operations",
    "notifications",
    "workspace",
    "ai-admission",
    "dev-model",
    "ai-worker",
    "gateway",
)


@dataclass(frozen=True)
class ProcessSpec:
    name: str
    health: str  # "grpc:HOST:PORT", "http:URL" or "alive"


def process_specs(settings: Settings, names: Iterable[str]) -> list[ProcessSpec]:
    health = {
        "operations": f"grpc:{settings.operations_target}",
        "notifications": f"grpc:{settings.notifications_target}",
        "workspace": f"grpc:{settings.workspace_target}",
        "ai-admission": f"grpc:{settings.ai_admission_target}",
        "dev-model": f"http:http://{settings.dev_model_bind}/v1/models",
        "gateway": f"http:http://{settings.gateway_bind}/healthz",
        "ai-worker": "alive",
    }
    return [ProcessSpec(name, health[name]) for name in names]


def healthy(check: str) -> bool:
    """Answer one health check: ``grpc:HOST:PORT``, ``http:URL`` or ``alive``."""
    kind, _, target = check.partition(":")
    if kind == "grpc":
        with grpc.insecure_channel(target) as channel:
            try:
                reply = health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(service=""), timeout=1
                )
            except grpc.RpcError:
                return False
            return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)
    if kind == "http":
        try:
            return httpx.get(target, timeout=1).status_code == 200
        except httpx.HTTPError:
            return False
    return True


@dataclass
class Stack:
    """A set of child processes sharing one environment."""

    env: Mapping[str, str]
    specs: list[ProcessSpec]
    out: IO[str] = field(default_factory=lambda: sys.stdout)
    children: dict[str, subprocess.Popen[str]] = field(default_factory=dict)
    _print_lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        width = max(len(spec.name) for spec in self.specs)
        for spec in self.specs:
            self.start_one(spec.name, width)

    def start_one(
        self,
        name: str,
        width: int = 0,
        *,
        label: str = "",
        extra_env: Mapping[str, str] | None = None,
    ) -> subprocess.Popen[str]:
        """Start ``opsctl serve name``; ``label`` names a second replica of the same process."""
        label = label or name
        child = subprocess.Popen(
            [sys.executable, "-m", "durable_ops.cli", "serve", name],
            env={**os.environ, **self.env, **(extra_env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            start_new_session=True,  # Ctrl-C reaches us, and we stop the children in order
        )
        self.children[label] = child
        threading.Thread(target=self._relay, args=(label.ljust(width), child), daemon=True).start()
        return child

    def _relay(self, label: str, child: subprocess.Popen[str]) -> None:
        assert child.stdout is not None
        for line in child.stdout:
            with self._print_lock:
                self.out.write(f"{label} | {line}")
                self.out.flush()

    def wait_healthy(
        self, timeout: float = HEALTH_TIMEOUT_SECONDS, checks: Iterable[str] = ()
    ) -> None:
        """Wait for every spec's health check, plus any extra ``checks`` given."""
        deadline = time.monotonic() + timeout
        for check in [*(spec.health for spec in self.specs), *checks]:
            while not healthy(check):
                dead = self.dead()
                if dead:
                    raise RuntimeError(f"{', '.join(dead)} exited during start-up")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{check} did not become healthy in {timeout:.0f} s")
                time.sleep(0.1)

    def dead(self) -> list[str]:
        return [name for name, child in self.children.items() if child.poll() is not None]

    def kill(self, label: str) -> None:
        """SIGKILL one child, as a crash would (fault drills)."""
        child = self.children[label]
        child.kill()
        child.wait()

    def stop(self, grace: float = STOP_GRACE_SECONDS) -> None:
        for child in self.children.values():
            if child.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    child.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for child in self.children.values():
            try:
                child.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()


def _stack_env(settings: Settings) -> dict[str, str]:
    env = {
        "OPS_DATABASE_URL": settings.database_url,
        "OPS_WORKERS_AI_OPERATIONS_ENABLED": "true",
        "OPS_DEV_LOGIN": "1",
    }
    if "OPS_DEV_MODEL_SECONDS" not in os.environ:
        env["OPS_DEV_MODEL_SECONDS"] = str(UP_DEV_MODEL_SECONDS)
    # The operator's secrets, or the ones kept in var/ (``durable_ops.local_secrets``):
    # every child signs and checks with the same ones, across restarts too.
    env["OPS_JWT_SECRET"] = settings.jwt_secret
    env["OPS_SERVICE_SECRET"] = settings.service_secret
    return env


def grant_ai(database_url: str, user: str) -> None:
    """The Pro plan with AI on for ``user``: what the demo user of ``opsctl up`` gets."""
    from durable_ops.clock import utc_now
    from durable_ops.storage import workspace
    from durable_ops.storage.migrate import open_migrated

    db = open_migrated(database_url, pool_size=1)
    try:
        db.run(
            lambda s: workspace.update_ai_settings(s, utc_now(), ai_enabled=True, plan="pro"),
            owner_id=user,
        )
    finally:
        db.dispose()


def run_stack(settings: Settings, *, demo_user: str) -> int:
    from durable_ops.storage import migrate

    migrate.upgrade(settings.database_url)
    if demo_user:
        grant_ai(settings.database_url, demo_user)
    stack = Stack(_stack_env(settings), process_specs(settings, DEFAULT_PROCESSES))
    stopping = threading.Event()

    def request_stop(_signum: int, _frame: object) -> None:
        stopping.set()

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    try:
        stack.start()
        stack.wait_healthy()
        url = f"http://{settings.gateway_bind}"
        print(f"\ndurable-ops is up at {url}/", flush=True)
        if demo_user:
            print(f"sign in: {url}/auth/dev-login?user={demo_user}\n", flush=True)
        while not stopping.wait(0.5):
            dead = stack.dead()
            if dead:
                print(f"{', '.join(dead)} exited; stopping everything", file=sys.stderr)
                return 1
        return 0
    except (RuntimeError, TimeoutError) as exc:
        print(f"opsctl up: {exc}", file=sys.stderr)
        return 1
    finally:
        stack.stop()
