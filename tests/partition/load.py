"""The product on the namespaced cluster, and the clients whose every call enters the history.

Services run in the root namespace as ``opsctl serve`` children (a ``Stack``), each
pointed at one node by its bridge address: operations-0 on node 1, operations-1
on node 2, ai-admission-0 on node 3, ai-admission-1 on node 1, workspace and
notifications on nodes 2 and 3, one gateway. Clients, each a thread of the test:

- gRPC creators, one per owner: ``CreateOperation`` with an idempotency key; an
  unknown answer is asked again with the same key; some creates are cancelled.
- HTTP admitters, one per owner: ``POST /api/jobs/{id}/strategy-snapshot`` with an
  ``Idempotency-Key`` against small AI capacity and a small global token budget;
  some admissions are cancelled over HTTP.
- raw workers: ``ClaimOperation`` then ``CompleteOperation`` with the lease token
  (asked again on an unknown answer); now and then one sleeps past its lease first.
- one SDK worker process (``tests.partition.sdk_worker``), paused past its lease by
  the process-pause schedule.

What counts as unknown: a deadline passed, the connection dropped, or the
service answered UNAVAILABLE/UNKNOWN/INTERNAL (a database that went away at
COMMIT leaves the outcome open). Only a definite refusal is ``fail``.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import httpx

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.api.operations.v1 import operations_pb2_grpc
from durable_ops.clock import utc_now
from durable_ops.gateway.auth import mint_user_token
from durable_ops.model import budgets, subjects
from durable_ops.model.scope import Role
from durable_ops.rpc.keys import private_key_path
from durable_ops.settings import service_variable
from durable_ops.stack.children import Stack
from durable_ops.storage import workspace
from durable_ops.storage.db import Database
from tests.partition import sdk_worker
from tests.partition.cluster import Cluster
from tests.partition.history import Call, History, Kind, Pending
from tests.support.drills import KeptLog
from tests.support.grpc_services import metadata
from tests.support.keys import key_env, keys_dir
from tests.support.ports import free_port
from tests.support.workspace_client import entitle

TASK = "jepsen.work"
AI_TASK = "strategy.snapshot"
JWT_SECRET = "jepsen-run-jwt-secret-0123456789abcdef"
USER_LIMIT, GLOBAL_LIMIT = 2, 5
JOB = ("Engineer", "Acme", "Python, gRPC, MariaDB")
EXPECTED_TOKENS = budgets.expected_tokens(
    budgets.input_tokens(
        subjects.JOB, dict(zip(("title", "company", "description"), JOB, strict=True))
    )
)
GLOBAL_DAILY_TOKENS = 4 * EXPECTED_TOKENS  # room for four analyses at once: a budget that binds
RAW_LEASE_SECONDS = 5
CALL_TIMEOUT = 5.0
UNKNOWN_CODES = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNKNOWN,
     grpc.StatusCode.INTERNAL, grpc.StatusCode.CANCELLED}
)  # fmt: skip
# node of each replica (1-based)
PLACEMENT = {
    "operations": [1, 2],
    "ai-admission": [3, 1],
    "workspace": [2],
    "notifications": [3],
}


def grpc_outcome(pending: Pending, error: grpc.RpcError) -> None:
    call: Any = error
    code = call.code()
    if code in UNKNOWN_CODES:
        pending.unknown(error=code.name)
    else:
        pending.fail(error=code.name)


class Credentials:
    """Service credentials, minted again before they expire (a run lasts minutes)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._made: dict[tuple[Role, str | None], tuple[float, tuple[tuple[str, str], ...]]] = {}

    def __call__(self, role: Role, owner: str | None = None) -> tuple[tuple[str, str], ...]:
        with self._lock:
            made = self._made.get((role, owner))
            if made is None or time.monotonic() - made[0] > 60:
                made = (time.monotonic(), metadata(role, owner))
                self._made[(role, owner)] = made
            return made[1]


@dataclass
class Product:
    cluster: Cluster
    logs: KeptLog = field(default_factory=KeptLog)
    stack: Stack | None = None
    ports: dict[str, list[int]] = field(default_factory=dict)
    gateway: str = ""
    sdk: subprocess.Popen[str] | None = None
    sdk_calls: list[Call] = field(default_factory=list)
    db: Database | None = None  # the harness's own reads and set-up, on node 1

    @property
    def operations_target(self) -> str:
        return "ipv4:" + ",".join(f"127.0.0.1:{port}" for port in self.ports["operations"])

    def start(self) -> None:
        from durable_ops.storage import migrate

        migrate.upgrade(self.cluster.url(1))
        self.ports = {name: [free_port() for _ in nodes] for name, nodes in PLACEMENT.items()}
        gateway_port = free_port()
        env = {
            "OPS_DATABASE_URL": self.cluster.url(1),
            **key_env(),
            "OPS_JWT_SECRET": JWT_SECRET,
            "OPS_LOG_LEVEL": "warning",
            "OPS_LOG_JSON": "true",
            "OPS_AI_USER_LIMIT": str(USER_LIMIT),
            "OPS_AI_GLOBAL_LIMIT": str(GLOBAL_LIMIT),
            "OPS_AI_GLOBAL_DAILY_TOKENS": str(GLOBAL_DAILY_TOKENS),
            "OPS_HOST_STORE_DIR": "",
            "OPS_AI_EXTERNAL_URL": "",
            "OPS_GATEWAY_BIND": f"127.0.0.1:{gateway_port}",
        }
        for name, ports in self.ports.items():
            env[service_variable(name, "target")] = "ipv4:" + ",".join(
                f"127.0.0.1:{port}" for port in ports
            )
        self.stack = Stack(env, specs=[], out=self.logs)
        for name, nodes in PLACEMENT.items():
            for replica, node in enumerate(nodes):
                self.stack.start_one(
                    name,
                    label=f"{name}-{replica}",
                    extra_env={
                        service_variable(name, "bind"): f"127.0.0.1:{self.ports[name][replica]}",
                        "OPS_DATABASE_URL": self.cluster.url(node),
                    },
                )
        self.stack.start_one("gateway")
        self.gateway = f"http://127.0.0.1:{gateway_port}"
        self.stack.wait_healthy(
            timeout=90,
            checks=[
                *(f"grpc:127.0.0.1:{port}" for ports in self.ports.values() for port in ports),
                f"http:{self.gateway}/readyz",
            ],
        )
        self.db = Database(self.cluster.url(1), pool_size=4)
        self.start_sdk_worker()

    def start_sdk_worker(self) -> None:
        self.sdk = subprocess.Popen(
            [sys.executable, "-m", "tests.partition.sdk_worker", self.operations_target],
            env={**os.environ, **key_env(),
                 "OPS_SERVICE_KEY": str(private_key_path(keys_dir(), Role.WORKER.value))},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
            start_new_session=True,
        )  # fmt: skip
        ready = threading.Event()

        def read(process: subprocess.Popen[str]) -> None:
            assert process.stdout is not None
            for line in process.stdout:
                if line.startswith("call "):
                    self.sdk_calls.append(Call.from_json(json.loads(line[5:])))
                elif line.startswith("worker_ready"):
                    ready.set()
                else:
                    self.logs.write(f"sdk-worker | {line}")
            ready.set()

        threading.Thread(target=read, args=(self.sdk,), daemon=True).start()
        if not ready.wait(30) or self.sdk.poll() is not None:
            raise RuntimeError("the SDK worker did not start")

    def pause(self, label: str) -> None:
        os.kill(self._pid(label), signal.SIGSTOP)

    def resume(self, label: str) -> None:
        os.kill(self._pid(label), signal.SIGCONT)

    def _pid(self, label: str) -> int:
        if label == "sdk-worker":
            assert self.sdk is not None
            return self.sdk.pid
        assert self.stack is not None
        return self.stack.children[label].pid

    def take_sdk_calls(self) -> list[Call]:
        taken, self.sdk_calls[:] = list(self.sdk_calls), []
        return taken

    def stop(self) -> None:
        for label in ("sdk-worker", *(self.stack.children if self.stack else ())):
            with contextlib.suppress(ProcessLookupError, AssertionError, KeyError):
                self.resume(label)  # a paused process cannot hear SIGTERM
        if self.sdk is not None and self.sdk.poll() is None:
            self.sdk.terminate()
            try:
                self.sdk.wait(15)
            except subprocess.TimeoutExpired:
                self.sdk.kill()
                self.sdk.wait(5)
        if self.stack is not None:
            self.stack.stop(grace=10)
        if self.db is not None:
            self.db.dispose()

    # ---- set-up per schedule ----------------------------------------------------------------

    def prepare_owner(self, owner: str, jobs: int) -> list[str]:
        """An owner on the Pro plan with ``jobs`` jobs to analyse."""
        assert self.db is not None
        entitle(self.db, owner)
        now = utc_now()
        return [
            self.db.run(lambda tx: workspace.create_job(tx, *JOB, now).id, owner_id=owner)
            for _ in range(jobs)
        ]


@dataclass
class Load:
    """The clients of one schedule: they run until ``stop`` is set."""

    product: Product
    history: History
    owners: list[str]
    jobs: dict[str, list[str]]
    seed: int = 40
    stop: threading.Event = field(default_factory=threading.Event)
    workers_stop: threading.Event = field(default_factory=threading.Event)
    sleepy_share: float = 0.0  # share of raw-worker attempts that sleep past their lease
    errors: list[BaseException] = field(default_factory=list)
    _threads: list[threading.Thread] = field(default_factory=list)
    _credentials: Credentials = field(default_factory=Credentials)

    def start(self, raw_workers: int = 4) -> None:
        channel = grpc.insecure_channel(
            self.product.operations_target, options=[("grpc.lb_policy_name", "round_robin")]
        )
        stub = operations_pb2_grpc.OperationsServiceStub(channel)
        for index, owner in enumerate(self.owners):
            self._spawn(self._creator, stub, owner, self.seed + index)
            self._spawn(self._admitter, stub, owner, self.seed + 100 + index)
        for index in range(raw_workers):
            self._spawn(self._raw_worker, stub, f"worker-{index}", self.seed + 200 + index)

    def stop_clients(self) -> None:
        self.stop.set()

    def join(self, timeout: float = 60.0) -> None:
        self.stop.set()
        self.workers_stop.set()
        for thread in self._threads:
            thread.join(timeout)

    def _spawn(self, target: Callable[..., None], *args: Any) -> None:
        def guarded() -> None:
            try:
                target(*args)
            except BaseException as error:  # reported by the run, not lost in a thread
                self.errors.append(error)

        thread = threading.Thread(target=guarded, daemon=True)
        thread.start()
        self._threads.append(thread)

    # ---- gRPC creators --------------------------------------------------------------------

    def _creator(self, stub: operations_pb2_grpc.OperationsServiceStub, owner: str,
                 seed: int) -> None:  # fmt: skip
        rng = random.Random(seed)
        for number in itertools.count():
            if self.stop.is_set():
                return
            key = f"{owner}-{number}"
            task = sdk_worker.TASK_TYPE if number % 3 == 0 else TASK
            request = pb.CreateOperationRequest(
                task_type=task, idempotency_key=key,
                subject=pb.Subject(type="job", id=f"j{number}"), max_attempts=3,
                retry_delay_seconds=1,
            )  # fmt: skip
            created = ""
            for _ in range(4):  # the same key again while the answer is unknown
                with self.history.call(f"grpc-{owner}", Kind.CREATE, owner=owner,
                                       key=key) as pending:  # fmt: skip
                    try:
                        response = stub.CreateOperation(
                            request, metadata=self._credentials(Role.GATEWAY, owner),
                            timeout=CALL_TIMEOUT,
                        )  # fmt: skip
                    except grpc.RpcError as error:
                        grpc_outcome(pending, error)
                    else:
                        created = response.operation.id
                        pending.ok(operation_id=created)
                if created or not pending.outcome_unknown or self.stop.is_set():
                    break
                time.sleep(0.2)
            if created and rng.random() < 0.2:
                self._cancel_grpc(stub, owner, created)
            time.sleep(rng.uniform(0.1, 0.3))

    def _cancel_grpc(self, stub: operations_pb2_grpc.OperationsServiceStub, owner: str,
                     operation_id: str) -> None:  # fmt: skip
        with self.history.call(f"grpc-{owner}", Kind.CANCEL, owner=owner,
                               operation_id=operation_id) as pending:  # fmt: skip
            try:
                stub.CancelOperation(
                    pb.CancelOperationRequest(operation_id=operation_id),
                    metadata=self._credentials(Role.GATEWAY, owner), timeout=CALL_TIMEOUT,
                )  # fmt: skip
            except grpc.RpcError as error:
                grpc_outcome(pending, error)
            else:
                pending.ok()

    # ---- HTTP admitters -----------------------------------------------------------------

    def _admitter(self, stub: operations_pb2_grpc.OperationsServiceStub, owner: str,
                  seed: int) -> None:  # fmt: skip
        rng = random.Random(seed)
        token = mint_user_token(JWT_SECRET, owner, 3600)
        headers = {"Authorization": f"Bearer {token}"}
        jobs = self.jobs[owner]
        with httpx.Client(base_url=self.product.gateway, timeout=CALL_TIMEOUT) as client:
            for number in itertools.count():
                if self.stop.is_set():
                    return
                key = f"{owner}-ai-{number}"
                job = jobs[number % len(jobs)]
                admitted = ""
                for _ in range(4):
                    with self.history.call(f"http-{owner}", Kind.ADMIT, owner=owner, key=key,
                                           tokens=str(EXPECTED_TOKENS)) as pending:  # fmt: skip
                        try:
                            response = client.post(
                                f"/api/jobs/{job}/strategy-snapshot", json={},
                                headers={**headers, "Idempotency-Key": key},
                            )  # fmt: skip
                        except httpx.TransportError as error:
                            pending.unknown(error=type(error).__name__)
                        else:
                            status = response.status_code
                            if status == 202:
                                admitted = str(response.json()["operation_id"])
                                pending.ok(operation_id=admitted)
                            elif status in (500, 502, 503, 504):
                                pending.unknown(error=str(status))
                            else:
                                pending.fail(error=str(status))
                    if admitted or not pending.outcome_unknown or self.stop.is_set():
                        break
                    time.sleep(0.2)
                if admitted and rng.random() < 0.3:
                    self._cancel_http(client, headers, owner, admitted)
                time.sleep(rng.uniform(0.05, 0.2))

    def _cancel_http(self, client: httpx.Client, headers: dict[str, str], owner: str,
                     operation_id: str) -> None:  # fmt: skip
        with self.history.call(f"http-{owner}", Kind.CANCEL, owner=owner,
                               operation_id=operation_id) as pending:  # fmt: skip
            try:
                response = client.post(f"/api/operations/{operation_id}/cancel", headers=headers)
            except httpx.TransportError as error:
                pending.unknown(error=type(error).__name__)
                return
            if response.status_code == 200:
                pending.ok()
            elif response.status_code >= 500:
                pending.unknown(error=str(response.status_code))
            else:
                pending.fail(error=str(response.status_code))

    # ---- raw workers ----------------------------------------------------------------------

    def _raw_worker(self, stub: operations_pb2_grpc.OperationsServiceStub, name: str,
                    seed: int) -> None:  # fmt: skip
        rng = random.Random(seed)
        neutral = self._credentials(Role.WORKER)
        while not self.workers_stop.is_set():
            claimed: pb.ClaimedOperation | None = None
            with self.history.call(name, Kind.CLAIM) as pending:
                try:
                    response = stub.ClaimOperation(
                        pb.ClaimOperationRequest(task_types=[TASK, AI_TASK],
                                                 lease_seconds=RAW_LEASE_SECONDS),
                        metadata=neutral, timeout=CALL_TIMEOUT,
                    )  # fmt: skip
                except grpc.RpcError as error:
                    grpc_outcome(pending, error)
                else:
                    if response.HasField("claimed"):
                        claimed = response.claimed
                        pending.ok(operation_id=claimed.operation.id, owner=claimed.owner_id,
                                   lease_token=claimed.lease_token)  # fmt: skip
                    else:
                        pending.fail(error="nothing to claim")
            if claimed is None:
                self.workers_stop.wait(0.1)
                continue
            if rng.random() < self.sleepy_share:
                time.sleep(RAW_LEASE_SECONDS + 2.0)  # a worker that stalls past its lease
            else:
                time.sleep(rng.uniform(0.05, 0.3))
            self._complete(stub, name, claimed)

    def _complete(self, stub: operations_pb2_grpc.OperationsServiceStub, name: str,
                  claimed: pb.ClaimedOperation) -> None:  # fmt: skip
        md = self._credentials(Role.WORKER, claimed.owner_id)
        for _ in range(4):  # a lease holder's repeat is answered what the first was
            with self.history.call(name, Kind.COMPLETE, operation_id=claimed.operation.id,
                                   lease_token=claimed.lease_token) as pending:  # fmt: skip
                try:
                    answer = stub.CompleteOperation(
                        pb.CompleteOperationRequest(operation_id=claimed.operation.id,
                                                    lease_token=claimed.lease_token),
                        metadata=md, timeout=CALL_TIMEOUT,
                    )  # fmt: skip
                except grpc.RpcError as error:
                    grpc_outcome(pending, error)
                else:
                    pending.ok(state=pb.OperationState.Name(answer.state))
            if not pending.outcome_unknown or self.workers_stop.is_set():
                return
            time.sleep(0.3)
