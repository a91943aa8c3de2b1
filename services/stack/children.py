"""``opsctl serve X`` children sharing one environment.

A child is named by what it serves, except ``services``: the four gRPC
services in one process (``SHARED``). ``Stack`` starts them, relays each line
they print through ``Output``, waits until each answers its health checks,
restarts one on request, and stops them all (SIGTERM, then SIGKILL after a
grace period or when forced): the workers first, so the leases they release on
their way out reach a running Operations service, then the rest together.
``opsctl up`` and the end-to-end tests use the same class with their own ports
and database.
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
from pathlib import Path
from typing import IO

from durable_ops.model.scope import Role
from durable_ops.settings import Settings
from durable_ops.stack.output import Output
from durable_ops.stack.tethered import command as tethered_command

STOP_GRACE_SECONDS = 10.0
STOP_FIRST = frozenset({"ai-worker"})  # hands its leases back through the services
_STOP_POLL_SECONDS = 0.02
HEALTH_TIMEOUT_SECONDS = 60.0


# Children that serve several targets of ``opsctl serve`` in one process: the four gRPC
# services pay Python's start-up once (ADR 40). Any other child serves its own name.
SHARED: dict[str, tuple[str, ...]] = {
    "services": ("operations", "notifications", "workspace", "ai-admission"),
}


@dataclass(frozen=True)
class ProcessSpec:
    name: str
    health: tuple[str, ...]  # each "grpc:HOST:PORT", "http:URL" or "alive"


def serves(name: str) -> tuple[str, ...]:
    """The ``opsctl serve`` targets the child ``name`` runs."""
    return SHARED.get(name, (name,))


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
    return [ProcessSpec(name, tuple(health[part] for part in serves(name))) for name in names]


# The processes that call the services, and the role whose key each is given: only its
# own (SPEC §2). The services themselves hold public keys only.
SIGNS_AS = {"gateway": Role.GATEWAY, "ai-worker": Role.WORKER}


def own_key_env(name: str, env: Mapping[str, str]) -> dict[str, str]:
    """``OPS_SERVICE_KEY`` for a child that signs: its role's key in the stack's keys folder."""
    role = SIGNS_AS.get(name)
    if role is None:
        return {}
    keys = Path(env.get("OPS_SERVICE_KEYS_DIR", "var/keys"))
    # rpc.keys.private_key_path's layout, spelled here: importing rpc (and grpc) would
    # cost the parent's start before its children run.
    return {"OPS_SERVICE_KEY": str(keys / role.value / f"{role.value}.key")}


def healthy(check: str) -> bool:
    """Answer one health check: ``grpc:HOST:PORT``, ``http:URL`` or ``alive``."""
    # Imported at the first check, not with this module: `opsctl up` starts its children
    # first, and its own imports then overlap theirs (a warm start's CPU is the bound).
    import grpc
    import httpx
    from grpc_health.v1 import health_pb2, health_pb2_grpc

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


@dataclass(frozen=True)
class _Launch:
    name: str
    extra_env: Mapping[str, str]


@dataclass
class Stack:
    """A set of child processes sharing one environment."""

    env: Mapping[str, str]
    specs: list[ProcessSpec]
    out: IO[str] = field(default_factory=lambda: sys.stdout)
    as_json: bool = False  # True: one JSON object per line (``Output``)
    # True: each child gets SIGTERM from Linux if this process dies without stopping it
    # (``stack.tethered``), so none outlives a killed supervisor. Then every start and
    # restart must come from a thread that lives as long as the children: the signal
    # follows the thread that started one. Off for the tests' stacks, whose fault drills
    # restart children from a thread of their own.
    tethered: bool = False
    children: dict[str, subprocess.Popen[str]] = field(default_factory=dict)
    _launches: dict[str, _Launch] = field(default_factory=dict)
    _output: Output | None = None

    @property
    def output(self) -> Output:
        if self._output is None:
            width = max((len(spec.name) for spec in self.specs), default=0)
            self._output = Output(self.out, as_json=self.as_json, width=width)
        return self._output

    def start(self, names: Iterable[str] | None = None) -> None:
        """Start the children ``names`` (default: every spec's)."""
        for name in [spec.name for spec in self.specs] if names is None else names:
            self.start_one(name)

    def start_one(
        self,
        name: str,
        *,
        label: str = "",
        extra_env: Mapping[str, str] | None = None,
    ) -> subprocess.Popen[str]:
        """Start ``opsctl serve name``; ``label`` names a second replica of the same process."""
        label = label or name
        self._launches[label] = _Launch(name, dict(extra_env or {}))
        return self._spawn(label)

    def restart(self, label: str) -> subprocess.Popen[str]:
        """Start a child that has exited again, as it was first started."""
        return self._spawn(label)

    def _spawn(self, label: str) -> subprocess.Popen[str]:
        launch = self._launches[label]
        own_key = own_key_env(launch.name, self.env)
        args = ["serve", *serves(launch.name)]
        child = subprocess.Popen(
            tethered_command(os.getpid(), args)
            if self.tethered
            else [sys.executable, "-m", "durable_ops.cli", *args],
            env={**os.environ, **self.env, **own_key, **launch.extra_env},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            start_new_session=True,  # Ctrl-C reaches us, and we stop the children in order
        )
        self.children[label] = child
        threading.Thread(target=self._relay, args=(label, child), daemon=True).start()
        return child

    def _relay(self, label: str, child: subprocess.Popen[str]) -> None:
        assert child.stdout is not None
        for line in child.stdout:
            self.output.child(label, line)

    def wait_healthy(
        self,
        timeout: float = HEALTH_TIMEOUT_SECONDS,
        checks: Iterable[str] = (),
        *,
        names: Iterable[str] | None = None,
    ) -> None:
        """Wait for the health checks of the specs ``names`` (default: every spec), plus
        any extra ``checks`` given."""
        chosen = None if names is None else set(names)
        specs = [spec for spec in self.specs if chosen is None or spec.name in chosen]
        deadline = time.monotonic() + timeout
        for check in [*(check for spec in specs for check in spec.health), *checks]:
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

    def stop(
        self, grace: float = STOP_GRACE_SECONDS, *, force: threading.Event | None = None
    ) -> list[str]:
        """SIGTERM the workers, then the others once the workers are gone; SIGKILL what
        is still running after ``grace`` in all or as soon as ``force`` is set. Answers
        the labels it had to kill."""
        deadline = time.monotonic() + grace
        force = force or threading.Event()
        first = [label for label in self.children if self._launches[label].name in STOP_FIRST]
        rest = [label for label in self.children if label not in first]
        return self._terminate(first, deadline, force) + self._terminate(rest, deadline, force)

    def stopping_order(self) -> tuple[list[str], list[str]]:
        """The running children ``stop`` waits for: the workers first, then the others."""
        running = [label for label, child in self.children.items() if child.poll() is None]
        first = [label for label in running if self._launches[label].name in STOP_FIRST]
        return first, [label for label in running if label not in first]

    def _terminate(self, labels: list[str], deadline: float, force: threading.Event) -> list[str]:
        children = [self.children[label] for label in labels]
        for child in children:
            if child.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    child.send_signal(signal.SIGTERM)
        while any(child.poll() is None for child in children):
            if force.is_set() or time.monotonic() >= deadline:
                break
            force.wait(_STOP_POLL_SECONDS)
        killed = []
        for label, child in zip(labels, children, strict=True):
            if child.poll() is None:
                child.kill()
                killed.append(label)
            child.wait()
        return killed
