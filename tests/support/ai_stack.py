"""The AI path as real processes on loopback, for end-to-end tests of the worker.

``ai_stack(db_url, ...)`` starts Operations, Notifications, Workspace and AI
Admission (and the AI worker, and ``opsctl serve dev-model`` when asked) with
``durable_ops.stack.children.Stack`` on free ports; tests drive it through gRPC stubs with
the gateway credential and ``x-owner-id``, as the gateway would. Misbehaving
models run in this process: ``ModelServer`` serves ``create_app(...)`` under
uvicorn in a thread, and its ``config`` can be changed while it runs. A real
model is llama.cpp's ``llama-server``: ``find_real_model()`` finds what
``scripts/real-model.sh build`` cached and ``LlamaServer`` runs it on a free port.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

import grpc
import httpx
import uvicorn
from sqlalchemy import func, select

from durable_ops.api.ai_admission.v1 import ai_admission_pb2 as apb
from durable_ops.api.ai_admission.v1 import ai_admission_pb2_grpc as apb_grpc
from durable_ops.api.notifications.v1 import notifications_pb2 as npb
from durable_ops.api.notifications.v1 import notifications_pb2_grpc as npb_grpc
from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.api.operations.v1 import operations_pb2_grpc as pb_grpc
from durable_ops.api.workspace.v1 import workspace_pb2 as wpb
from durable_ops.api.workspace.v1 import workspace_pb2_grpc as wpb_grpc
from durable_ops.cli import GRPC_SERVICES
from durable_ops.clock import utc_now
from durable_ops.dev_model import DevModelConfig, create_app
from durable_ops.model.budgets import MODEL_CONTEXT_TOKENS
from durable_ops.model.scope import Role
from durable_ops.settings import Settings, service_variable
from durable_ops.stack.children import Stack, process_specs
from durable_ops.storage import migrate, workspace
from durable_ops.storage.db import Database
from durable_ops.storage.schema import AiWorkspaceNote, UserNotification, UserOperation
from tests.support import stored
from tests.support.keys import credential, key_env
from tests.support.ports import free_port, refusing_port

SERVICES = ("operations", "notifications", "workspace", "ai-admission")
STRATEGY = "strategy.snapshot"
CV_REVIEW = "cv.review"

JOB = {
    "title": "Senior Data Engineer",
    "company": "Globex Analytics",
    "description": (
        "We are hiring a data engineer. Requirements: Python, Spark, Airflow, Kafka, SQL "
        "and dbt. You will build Spark pipelines and Airflow DAGs in Python."
    ),
}
CV_TEXT = """Jane Doe
jane@example.com

## Experience
- Built Spark and Kafka pipelines processing 2TB per day in Python
- Cut Airflow DAG runtime by 45% through SQL and dbt model tuning
- Led a team of 4 engineers

## Education
MSc Computer Science

## Skills
Python, SQL, Spark, Kafka
"""

S = pb.OperationState
T = TypeVar("T")


def closed_port_url() -> str:
    """A model URL where every connection is refused."""
    return f"http://127.0.0.1:{refusing_port()}/v1"


def wait_for(
    probe: Callable[[], T | None], *, timeout: float, interval: float = 0.05, what: str = ""
) -> T:
    """Poll ``probe`` until it returns something truthy; fail the test after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what or probe}")
        time.sleep(interval)


class LogTee(io.StringIO):
    """Keeps every line the children print (for assertions) and echoes it for pytest."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            self.lines.append(text)
        sys.stdout.write(text)
        return len(text)

    def flush(self) -> None:
        sys.stdout.flush()

    def events(self, process: str, event: str) -> list[dict[str, Any]]:
        """The JSON log events named ``event`` that ``process`` printed."""
        found = []
        with self._lock:
            lines = list(self.lines)
        for line in lines:
            label, _, payload = line.partition(" | ")
            if label.strip() != process:
                continue
            with contextlib.suppress(ValueError):
                record = json.loads(payload)
                if isinstance(record, dict) and record.get("event") == event:
                    found.append(record)
        return found


class ModelServer:
    """``create_app(...)`` served by uvicorn on a free port, in a thread of the test.

    ``completions`` counts the chat-completion requests it received. ``port``: where it
    listens (a free one when None), so a test can bring a model back where it was down.
    """

    def __init__(self, *, port: int | None = None, **app_options: Any) -> None:
        self.app = create_app(**app_options)
        self.port = port or free_port()
        self.completions = 0
        config = uvicorn.Config(
            self._counting,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            access_log=False,
            # A slow drill model may still be sleeping on a request the worker gave up.
            timeout_graceful_shutdown=1,
            interface="asgi3",
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        wait_for(lambda: self._server.started, timeout=10, what="the model server")

    async def _counting(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"].endswith("/chat/completions"):
            self.completions += 1
        await self.app(scope, receive, send)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def config(self) -> DevModelConfig:
        config: DevModelConfig = self.app.state.config
        return config

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)


@dataclass
class AiStack:
    stack: Stack
    env: dict[str, str]
    db: Database
    logs: LogTee
    channels: dict[str, grpc.Channel] = field(default_factory=dict)
    extra_workers: list[Stack] = field(default_factory=list)

    # ---- the worker process ---------------------------------------------------------------

    def worker_events(self, event: str) -> list[dict[str, Any]]:
        return self.logs.events("ai-worker", event)

    def wait_worker_event(
        self, event: str, count: int = 1, timeout: float = 30
    ) -> list[dict[str, Any]]:
        """The worker's ``event`` log events, once there are at least ``count`` of them."""

        def enough() -> list[dict[str, Any]] | None:
            found = self.worker_events(event)
            return found if len(found) >= count else None

        return wait_for(enough, timeout=timeout, what=f"{count} worker event(s) {event}")

    def start_worker(self, **env_overrides: str) -> subprocess.Popen[str]:
        """One more ``opsctl serve ai-worker`` with changed settings; stopped with the stack."""
        env = {**self.env, **env_overrides}
        extra = Stack(env, process_specs(Settings.from_env(env), ["ai-worker"]), out=self.logs)
        self.extra_workers.append(extra)
        return extra.start_one("ai-worker")

    # ---- stubs, with the gateway credential and the owner ---------------------------------

    def _channel(self, target_variable: str) -> grpc.Channel:
        target = self.env[target_variable]
        if target not in self.channels:
            self.channels[target] = grpc.insecure_channel(target)
        return self.channels[target]

    @property
    def operations(self) -> pb_grpc.OperationsServiceStub:
        return pb_grpc.OperationsServiceStub(self._channel("OPS_OPERATIONS_TARGET"))

    @property
    def workspace(self) -> wpb_grpc.WorkspaceServiceStub:
        return wpb_grpc.WorkspaceServiceStub(self._channel("OPS_WORKSPACE_TARGET"))

    @property
    def admission(self) -> apb_grpc.AiAdmissionServiceStub:
        return apb_grpc.AiAdmissionServiceStub(self._channel("OPS_AI_ADMISSION_TARGET"))

    @property
    def notifications(self) -> npb_grpc.NotificationsServiceStub:
        return npb_grpc.NotificationsServiceStub(self._channel("OPS_NOTIFICATIONS_TARGET"))

    @staticmethod
    def md(owner: str) -> tuple[tuple[str, str], ...]:
        token = credential(Role.GATEWAY)
        return (("authorization", f"Bearer {token}"), ("x-owner-id", owner))

    # ---- the owner's side -----------------------------------------------------------------

    def entitle(self, owner: str, privacy: str = "local_only") -> None:
        """What ``opsctl users set-plan OWNER pro`` and the settings page do."""
        self.db.run(
            lambda tx: workspace.update_ai_settings(tx, utc_now(), plan="pro"), owner_id=owner
        )
        self.workspace.UpdateAiSettings(
            wpb.UpdateAiSettingsRequest(ai_enabled=True, privacy=privacy), metadata=self.md(owner)
        )

    def revoke(self, owner: str) -> None:
        self.db.run(
            lambda tx: workspace.update_ai_settings(tx, utc_now(), plan="free"), owner_id=owner
        )

    def create_job(self, owner: str) -> str:
        job = self.workspace.CreateJob(wpb.CreateJobRequest(**JOB), metadata=self.md(owner))
        return str(job.id)

    def create_cv(self, owner: str, text: str = CV_TEXT) -> str:
        request = wpb.CreateAttachmentRequest(kind="cv", filename="cv.txt", text=text)
        return str(self.workspace.CreateAttachment(request, metadata=self.md(owner)).id)

    def admit(self, owner: str, task_type: str, subject_id: str, context_ref: str = "") -> str:
        request = apb.AdmitRequest(
            task_type=task_type, subject_id=subject_id, context_ref=context_ref
        )
        reply = self.admission.Admit(request, metadata=self.md(owner))
        return str(reply.operation.id)

    def get(self, owner: str, operation_id: str) -> pb.Operation:
        request = pb.GetOperationRequest(operation_id=operation_id)
        operation: pb.Operation = self.operations.GetOperation(request, metadata=self.md(owner))
        return operation

    def cancel(self, owner: str, operation_id: str) -> pb.Operation:
        request = pb.CancelOperationRequest(operation_id=operation_id)
        operation: pb.Operation = self.operations.CancelOperation(request, metadata=self.md(owner))
        return operation

    def wait_state(
        self,
        owner: str,
        operation_id: str,
        state: pb.OperationState.ValueType,
        *,
        timeout: float,
    ) -> pb.Operation:
        return wait_for(
            lambda: ((op := self.get(owner, operation_id)).state == state and op) or None,
            timeout=timeout,
            what=f"{operation_id} to be {S.Name(state)}",
        )

    def notes_of(
        self, owner: str, kind: str, subject_type: str, subject_id: str
    ) -> wpb.AiWorkspaceNote | None:
        """The published note, or None (NOT_FOUND)."""
        request = wpb.GetNoteRequest(kind=kind, subject_type=subject_type, subject_id=subject_id)
        try:
            note: wpb.AiWorkspaceNote = self.workspace.GetNote(request, metadata=self.md(owner))
        except grpc.RpcError as error:
            if error.code() == grpc.StatusCode.NOT_FOUND:
                return None
            raise
        return note

    def notifications_of(self, owner: str) -> list[npb.Notification]:
        reply = self.notifications.ListNotifications(
            npb.ListNotificationsRequest(page_size=100), metadata=self.md(owner)
        )
        return list(reply.notifications)

    def lookup(self, owner: str, task_type: str, subject_id: str) -> pb.Operation | None:
        reply = self.admission.Lookup(
            apb.LookupRequest(task_type=task_type, subject_id=subject_id), metadata=self.md(owner)
        )
        return reply.operation if reply.HasField("operation") else None

    # ---- what only the database shows -----------------------------------------------------

    def row(self, operation_id: str) -> UserOperation:
        row = stored.operation(self.db, operation_id)
        assert row is not None
        return row

    def count_notes(self, operation_id: str) -> int:
        query = select(func.count()).select_from(AiWorkspaceNote)
        where = AiWorkspaceNote.operation_id == operation_id
        return int(stored.scalar(self.db, query.where(where)) or 0)

    def count_notifications(self, operation_id: str) -> int:
        query = select(func.count()).select_from(UserNotification)
        where = UserNotification.operation_id == operation_id
        return int(stored.scalar(self.db, query.where(where)) or 0)

    def close(self) -> None:
        for channel in self.channels.values():
            channel.close()
        self.db.dispose()


def stack_env(db_url: str, **overrides: str) -> dict[str, str]:
    env = {
        "OPS_DATABASE_URL": db_url,
        **key_env(),
        "OPS_LOG_JSON": "true",
        "OPS_WORKERS_AI_OPERATIONS_ENABLED": "true",
        "OPS_WORKER_LEASE_SECONDS": "5",
        "OPS_WORKER_POLL_SECONDS": "0.1",
        "OPS_WORKER_TASK_TIMEOUT_SECONDS": "20",
        "OPS_HOST_STORE_DIR": "",
        "OPS_AI_EXTERNAL_URL": "",
        "OPS_DEV_MODEL_BIND": f"127.0.0.1:{free_port()}",
        "OPS_DEV_MODEL_SECONDS": "0",  # whatever the outer environment says
    }
    for name in GRPC_SERVICES:
        address = f"127.0.0.1:{free_port()}"
        env[service_variable(name, "bind")] = env[service_variable(name, "target")] = address
    env["OPS_AI_LOCAL_URL"] = f"http://{env['OPS_DEV_MODEL_BIND']}/v1"
    env.update(overrides)
    return env


# A port found free can be taken by someone else before the child binds it; a
# start-up that fails that way is tried once more on fresh ports.
START_ATTEMPTS = 2


def _started(db_url: str, names: list[str], logs: LogTee, env_overrides: dict[str, str]) -> AiStack:
    for attempt in range(1, START_ATTEMPTS + 1):
        env = stack_env(db_url, **env_overrides)
        stack = Stack(env, process_specs(Settings.from_env(env), names), out=logs)
        try:
            stack.start()
            stack.wait_healthy(timeout=60)
            if stack.dead():  # healthy was someone else on our port; ours could not bind
                raise RuntimeError(f"{', '.join(stack.dead())} exited during start-up")
        except RuntimeError:
            stack.stop(grace=5)
            if attempt == START_ATTEMPTS:
                raise
            continue
        return AiStack(stack, env, Database(db_url, pool_size=2), logs)
    raise AssertionError("unreachable")


@contextlib.contextmanager
def ai_stack(
    db_url: str, *, dev_model: bool = False, worker: bool = True, **env_overrides: str
) -> Iterator[AiStack]:
    """Start the services (and worker, and dev model) on ``db_url``; stop them on exit."""
    migrate.upgrade(db_url)
    names = [*SERVICES, *(["dev-model"] if dev_model else []), *(["ai-worker"] if worker else [])]
    running = _started(db_url, names, LogTee(), env_overrides)
    try:
        if worker:
            enabled = running.env["OPS_WORKERS_AI_OPERATIONS_ENABLED"] == "true"
            running.wait_worker_event("ai_worker_started" if enabled else "ai_worker_idle")
        yield running
    finally:
        for extra in running.extra_workers:
            extra.stop(grace=10)
        running.stack.stop(grace=10)
        running.close()


# ---- a real model: llama-server and the GGUF that scripts/real-model.sh caches ------------

REAL_MODEL_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "real-model.sh"


@dataclass(frozen=True)
class RealModel:
    server: Path  # the llama-server binary
    gguf: Path
    name: str  # what the server answers to (its --alias): the route's model name


def find_real_model() -> RealModel | None:
    """What ``scripts/real-model.sh build`` cached, or None when it has not been built.

    ``OPS_LLAMA_SERVER`` and ``OPS_REAL_MODEL_GGUF`` (with ``OPS_REAL_MODEL_NAME``)
    name another binary and model instead. Never builds: that takes minutes.
    """
    server, gguf = os.environ.get("OPS_LLAMA_SERVER"), os.environ.get("OPS_REAL_MODEL_GGUF")
    if server and gguf:
        name = os.environ.get("OPS_REAL_MODEL_NAME") or Path(gguf).stem
        return RealModel(Path(server), Path(gguf), name)
    found = subprocess.run(
        ["bash", str(REAL_MODEL_SCRIPT), "paths"], capture_output=True, text=True, check=False
    )
    if found.returncode != 0:
        return None
    paths = dict(line.split("=", 1) for line in found.stdout.splitlines() if "=" in line)
    return RealModel(Path(paths["LLAMA_SERVER"]), Path(paths["GGUF"]), paths["MODEL"])


class LlamaServer:
    """``llama-server`` serving ``model`` on a free loopback port; its output goes to ``log``.

    One slot unless ``parallel`` says more (requests queue rather than split the
    cores), the context per slot ``scripts/real-model.sh`` serves with
    (``budgets.MODEL_CONTEXT_TOKENS``: the largest prompt and answer fit), the GGUF's own chat
    template, and all cores but one: ggml's threads spin waiting for each other,
    so on 2 busy cores two threads generate 4 to 8 times slower than one.
    ``stop()`` ends it (SIGTERM, then SIGKILL).
    """

    READY_SECONDS = 90

    def __init__(
        self, model: RealModel, log: Path, *, threads: int | None = None, parallel: int = 1
    ) -> None:
        self.model = model
        self.port = free_port()
        self._log: IO[str] = log.open("w")
        self.process = subprocess.Popen(
            [
                str(model.server),
                *("--model", str(model.gguf), "--alias", model.name),
                *("--host", "127.0.0.1", "--port", str(self.port)),
                # Each slot gets the context one slot has (llama.cpp divides it).
                *("--ctx-size", str(MODEL_CONTEXT_TOKENS * parallel)),
                *("--parallel", str(parallel)),
                "--no-webui",
                *("--threads", str(threads or max(1, (os.cpu_count() or 2) - 1))),
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        self.log = log
        try:
            wait_for(self._ready, timeout=self.READY_SECONDS, interval=0.2, what="llama-server")
        except BaseException:
            self.stop()
            raise

    def _ready(self) -> bool:
        if self.process.poll() is not None:
            tail = self.log.read_text(errors="replace")[-2000:]
            raise AssertionError(f"llama-server exited with {self.process.returncode}:\n{tail}")
        try:
            health = httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=2)
        except httpx.TransportError:
            return False  # not listening yet
        return health.status_code == 200  # 503 while the model loads

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def model_ids(self) -> list[str]:
        """The ids ``GET /v1/models`` lists: the name the server itself gives its model."""
        listed = httpx.get(f"{self.url}/models", timeout=5).raise_for_status().json()
        return [str(entry["id"]) for entry in listed["data"]]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._log.close()
