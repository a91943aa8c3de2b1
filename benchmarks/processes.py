"""Real product processes (``opsctl serve X``) on free loopback ports, and their clients.

The children write their logs straight to files (not through a pipe this
process would have to relay), so the benchmark's own CPU is spent on the
clients it measures.
"""

from __future__ import annotations

import atexit
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from durable_ops.model.scope import Role
from durable_ops.rpc.client import ServiceCaller
from durable_ops.rpc.keys import SigningKey, TrustedKeys, ensure_role_keys, private_key_path
from durable_ops.settings import service_variable
from durable_ops.stack.children import healthy, own_key_env
from tests.support import ports

JWT_SECRET = "bench-jwt-secret-" + secrets.token_hex(16)
START_TIMEOUT_SECONDS = 60.0
STOP_GRACE_SECONDS = 10.0
LOG_DIR = Path(tempfile.gettempdir()) / "durable-ops-bench-logs"


# Below the kernel's ephemeral range (32768-60999 here), above the tests' own
# (tests/support/ports.py) and the Galera tests' (23311-24570): a port drawn from the
# ephemeral range (bind to 0) can become an outgoing connection's local port before the
# child binds it (the CI soak lost a replica so).
PORTS = range(25000, 32000)


def free_port() -> int:
    """A loopback port of ``PORTS`` nothing listens on, never handed out twice by this process."""
    return ports.free_port(PORTS)


@cache
def keys_dir() -> Path:
    """A key pair per role for this benchmark run, in a private folder made once and removed
    at exit; every child trusts its public keys and signs with its own role's key."""
    directory = Path(tempfile.mkdtemp(prefix="durable-ops-bench-keys-"))
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    ensure_role_keys(directory)
    return directory


@cache
def signing_key(role: Role) -> SigningKey:
    return SigningKey.load(private_key_path(keys_dir(), role.value))


@cache
def trusted() -> TrustedKeys:
    """The run's public keys, for servers built in this process."""
    return TrustedKeys(keys_dir())


def caller(role: Role) -> ServiceCaller:
    return ServiceCaller(signing_key(role))


@dataclass
class Child:
    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(STOP_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


def _start(name: str, env: Mapping[str, str]) -> Child:
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    log = LOG_DIR / f"{name}-{secrets.token_hex(4)}.log"
    keys = {"OPS_SERVICE_KEYS_DIR": str(keys_dir())}
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "durable_ops.cli", "serve", name],
            env={
                **os.environ,
                **keys,
                **own_key_env(name, keys),  # the gateway's or the AI worker's own key
                "OPS_JWT_SECRET": JWT_SECRET,
                "OPS_LOG_JSON": "true",
                **env,
            },
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Child(name, process, log)


def _wait(child: Child, check: str) -> None:
    """Until ``check`` (a ``stack.children.healthy`` check) answers, or the child dies."""
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while not healthy(check):
        if child.process.poll() is not None:
            tail = child.log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{child.name} exited during start-up:\n{tail}")
        if time.monotonic() > deadline:
            child.stop()
            raise TimeoutError(f"{child.name} did not answer {check} in time")
        time.sleep(0.1)


# The Operations children behind each target operations_server yields, for cpu_seconds.
_SERVING: dict[str, list[Child]] = {}


def process_cpu_seconds(pid: int) -> float:
    """User plus system CPU the process ``pid`` has used so far (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def cpu_seconds(target: str) -> float:
    """User plus system CPU the Operations processes behind ``target`` have used so far."""
    return sum(process_cpu_seconds(child.process.pid) for child in _SERVING[target])


@contextmanager
def operations_server(database_url: str, *, replicas: int = 1, **env: str) -> Iterator[str]:
    """``replicas`` copies of ``opsctl serve operations`` on ``database_url``, each on its own
    port; yields the gRPC target naming them all (round robin, as docs/operations.md
    "Scaling" configures clients)."""
    children: list[Child] = []
    addresses: list[str] = []
    target = ""
    try:
        for _ in range(replicas):
            address = f"127.0.0.1:{free_port()}"
            bind = {"OPS_DATABASE_URL": database_url, "OPS_OPERATIONS_BIND": address}
            children.append(_start("operations", {**bind, **env}))
            addresses.append(address)
        for child, address in zip(children, addresses, strict=True):
            _wait(child, f"grpc:{address}")
        target = addresses[0] if replicas == 1 else "ipv4:" + ",".join(addresses)
        _SERVING[target] = children
        yield target
    finally:
        _SERVING.pop(target, None)
        for child in children:
            child.stop()


# The gateway child behind each base URL gateway_server yields, for gateway_pid.
_GATEWAYS: dict[str, Child] = {}


def gateway_pid(base: str) -> int:
    return _GATEWAYS[base].process.pid


@contextmanager
def gateway_server(
    operations_target: str,
    database_url: str | None = None,
    env: Mapping[str, str] | None = None,
) -> Iterator[str]:
    """``opsctl serve gateway`` in front of ``operations_target`` (``env`` adds to its
    environment, e.g. the other services' targets); with ``database_url``, also the
    Workspace service it asks on every request whether the user's token or session still
    stands (issue 35). Yields its base URL."""
    extra = dict(env or {})
    children: list[Child] = []
    base = ""
    try:
        if database_url is not None:
            workspace = f"127.0.0.1:{free_port()}"
            bind_variable = service_variable("workspace", "bind")
            children.append(
                _start("workspace", {"OPS_DATABASE_URL": database_url, bind_variable: workspace})
            )
            _wait(children[0], f"grpc:{workspace}")
            extra[service_variable("workspace", "target")] = workspace
        bind = f"127.0.0.1:{free_port()}"
        gateway = _start(
            "gateway",
            {"OPS_GATEWAY_BIND": bind, "OPS_OPERATIONS_TARGET": operations_target, **extra},
        )
        children.append(gateway)
        base = f"http://{bind}"
        _wait(gateway, f"http:{base}/healthz")
        _GATEWAYS[base] = gateway
        yield base
    finally:
        _GATEWAYS.pop(base, None)
        for child in reversed(children):
            child.stop()


AI_SERVICES = ("notifications", "workspace", "ai-admission")


@dataclass
class AiStack:
    """The AI path as real processes: Operations replicas, the services, model and worker."""

    replicas: list[str]  # each Operations replica's address
    target: str  # the round-robin target naming them all
    workspace: str
    admission: str
    children: dict[str, Child]
    services: dict[str, str]  # each of AI_SERVICES' address

    def targets(self) -> dict[str, str]:
        """The environment naming the services' targets (for a gateway in front of them)."""
        return {
            service_variable(name, "target"): address for name, address in self.services.items()
        }

    def events(self, label: str, event: str) -> list[dict[str, Any]]:
        """The JSON log events named ``event`` that the child ``label`` has written so far."""
        found: list[dict[str, Any]] = []
        for line in self.children[label].log.read_text(errors="replace").splitlines():
            with suppress(ValueError):
                record = json.loads(line)
                if isinstance(record, dict) and record.get("event") == event:
                    found.append(record)
        return found


@contextmanager
def ai_stack(
    database_url: str, *, replicas: int = 2, env: Mapping[str, str] | None = None
) -> Iterator[AiStack]:
    """``replicas`` Operations processes behind one target, Notifications, Workspace, AI
    Admission, the development model and one AI worker (local route only, no host store),
    every address on a free loopback port; ``env`` overrides the shared environment
    (``OPS_DEV_MODEL_BIND`` too: the worker may be pointed through a relay with
    ``OPS_AI_LOCAL_URL``). Children are labelled ``operations-1``.., ``dev-model``,
    ``ai-worker`` and by name."""
    addresses = [f"127.0.0.1:{free_port()}" for _ in range(replicas)]
    model = (env or {}).get("OPS_DEV_MODEL_BIND") or f"127.0.0.1:{free_port()}"
    shared = {
        "OPS_DATABASE_URL": database_url,
        "OPS_OPERATIONS_TARGET": "ipv4:" + ",".join(addresses),
        "OPS_DEV_MODEL_BIND": model,
        "OPS_AI_LOCAL_URL": f"http://{model}/v1",
        "OPS_AI_EXTERNAL_URL": "",
        "OPS_HOST_STORE_DIR": "",
        "OPS_WORKERS_AI_OPERATIONS_ENABLED": "true",
        "PYTHONUNBUFFERED": "1",
    }
    services: dict[str, str] = {}
    for name in AI_SERVICES:
        services[name] = f"127.0.0.1:{free_port()}"
        shared[service_variable(name, "bind")] = services[name]
        shared[service_variable(name, "target")] = services[name]
    shared.update(env or {})
    children: dict[str, Child] = {}
    checks: dict[str, str] = {}
    try:
        for index, address in enumerate(addresses, start=1):
            label = f"operations-{index}"
            children[label] = _start("operations", {**shared, "OPS_OPERATIONS_BIND": address})
            checks[label] = f"grpc:{address}"
        for name, address in services.items():
            children[name] = _start(name, shared)
            checks[name] = f"grpc:{address}"
        children["dev-model"] = _start("dev-model", shared)
        checks["dev-model"] = f"http:http://{model}/v1/models"
        for label, check in checks.items():
            _wait(children[label], check)
        children["ai-worker"] = _start("ai-worker", shared)
        stack = AiStack(
            addresses,
            shared["OPS_OPERATIONS_TARGET"],
            services["workspace"],
            services["ai-admission"],
            children,
            services,
        )
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while not stack.events("ai-worker", "ai_worker_started"):
            if children["ai-worker"].process.poll() is not None or time.monotonic() > deadline:
                tail = children["ai-worker"].log.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"the AI worker did not start:\n{tail}")
            time.sleep(0.1)
        yield stack
    finally:
        worker = children.pop("ai-worker", None)
        if worker is not None:  # first, so it gives its lease back to a live service
            worker.stop()
        for child in children.values():
            child.stop()


REAL_MODEL_SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "real-model.sh"
REAL_MODEL_READY_SECONDS = 120.0  # loading the model on a busy 2-core machine


def real_model_paths() -> dict[str, str] | None:
    """``scripts/real-model.sh paths`` (LLAMA_SERVER, GGUF, MODEL), or None when not built
    (a benchmark never builds it)."""
    found = subprocess.run(
        ["bash", str(REAL_MODEL_SCRIPT), "paths"], capture_output=True, text=True, check=False
    )
    if found.returncode != 0:
        return None
    return dict(line.split("=", 1) for line in found.stdout.splitlines() if "=" in line)


@contextmanager
def llama_server(port: int, *options: str) -> Iterator[Child]:
    """``scripts/real-model.sh serve`` on ``port`` (``options``: llama-server's own), once
    its ``/health`` answers; stopped at the end."""
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    log = LOG_DIR / f"llama-server-{secrets.token_hex(4)}.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            ["bash", str(REAL_MODEL_SCRIPT), "serve", "--port", str(port), *options],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    server = Child("llama-server", process, log)
    try:
        deadline = time.monotonic() + REAL_MODEL_READY_SECONDS
        while not healthy(f"http:http://127.0.0.1:{port}/health"):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"llama-server did not start: {log}")
            time.sleep(0.5)
        yield server
    finally:
        server.stop()
