"""Fault drill: SIGKILL a random AI worker or Operations replica every few seconds, then audit.

Real processes on loopback on MariaDB: two Operations replicas behind one
round-robin target, Notifications, Workspace, AI Admission, the gateway, the
development model taking about a second per answer (so a killed worker is
mid-inference) and three AI workers with two inferences each and a 5-second
lease. Four users start 100 strategy snapshots through the gateway's HTTP API
while ``Chaos`` kills one of those five processes every 1.5 to 3 seconds (never
the last Operations replica that is up) and starts it again. When the kills
stop, every operation must become terminal within a bound (leases expire, the
sweeper retries), and the database must show none lost, none stuck, none done
twice, exactly one notification per operation, at most one note each (the
success's own) and no attempt past its budget. The figures are printed.
"""

from __future__ import annotations

import collections
import contextlib
import random
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select

from durable_ops.gateway.auth import mint_user_token
from durable_ops.model.states import ACTIVE_STATES, OperationState
from durable_ops.model.tasks import STRATEGY_SNAPSHOT
from durable_ops.settings import service_variable
from durable_ops.stack.children import Stack
from durable_ops.storage.db import Database
from durable_ops.storage.schema import UserOperation
from tests.conftest import MakeDatabase
from tests.support import stored
from tests.support.ai_stack import JOB
from tests.support.drills import Chaos, KeptLog, audit
from tests.support.figures import report
from tests.support.keys import key_env
from tests.support.ports import free_port
from tests.support.workspace_client import entitle

pytestmark = [pytest.mark.slow, pytest.mark.mariadb]

JWT_SECRET = "drill-kills-jwt-secret-0123456789abcdef"
USERS = 4
JOBS_PER_USER = 25
TOTAL = USERS * JOBS_PER_USER
WORKERS = 3
REPLICAS = 2
KILL_SECONDS = 32.0  # kills go on this long, from the first admission on
SETTLE_SECONDS = 90.0  # then everything must be terminal within this bound
ADMIT_PAUSE_SECONDS = 1.0  # per user: admissions last about as long as the kills
MODEL_SECONDS = "1.0"
OPERATIONS = [f"operations-{index}" for index in range(REPLICAS)]
AI_WORKERS = [f"ai-worker-{index}" for index in range(WORKERS)]
ONE_EACH = ("notifications", "workspace", "ai-admission")
SNAPSHOT_ROUTE = "/api/jobs/{id}/strategy-snapshot"
ACTIVE = [state.value for state in ACTIVE_STATES]


@dataclass
class Drill:
    stack: Stack
    env: dict[str, str]
    gateway: str
    checks: dict[str, str]  # label -> its health check, for the restarts
    logs: KeptLog
    log_path: Path  # where every child's lines are written at the end, for a failed audit


@pytest.fixture
def drill(
    copy_of_migrated_mariadb: MakeDatabase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Drill]:
    monkeypatch.chdir(tmp_path)  # the children's cwd: nothing lands in the checkout
    url = copy_of_migrated_mariadb()
    replica_ports = [free_port() for _ in OPERATIONS]
    model_bind = f"127.0.0.1:{free_port()}"
    gateway_bind = f"127.0.0.1:{free_port()}"
    env = {
        "OPS_DATABASE_URL": url,
        **key_env(),  # the gateway and the AI worker get their own key from it
        "OPS_JWT_SECRET": JWT_SECRET,
        "OPS_LOG_LEVEL": "warning",
        "OPS_LOG_JSON": "true",
        "OPS_AI_USER_LIMIT": str(TOTAL),  # capacity is not what this drill is about
        "OPS_AI_GLOBAL_LIMIT": str(TOTAL),
        "OPS_DEV_MODEL_BIND": model_bind,
        "OPS_DEV_MODEL_SECONDS": MODEL_SECONDS,
        "OPS_AI_LOCAL_URL": f"http://{model_bind}/v1",
        "OPS_AI_EXTERNAL_URL": "",
        "OPS_GATEWAY_BIND": gateway_bind,
        "OPS_WORKERS_AI_OPERATIONS_ENABLED": "true",
        "OPS_WORKER_CONCURRENCY": "2",
        "OPS_WORKER_LEASE_SECONDS": "5",  # the shortest allowed: a killed worker's lease ends soon
        "OPS_WORKER_POLL_SECONDS": "0.1",
        "OPS_WORKER_TASK_TIMEOUT_SECONDS": "20",
        "OPS_HOST_STORE_DIR": "",  # three workers on one host
        "OPS_OPERATIONS_TARGET": "ipv4:" + ",".join(f"127.0.0.1:{port}" for port in replica_ports),
    }
    checks = {
        label: f"grpc:127.0.0.1:{port}"
        for label, port in zip(OPERATIONS, replica_ports, strict=True)
    }
    for name in ONE_EACH:
        address = f"127.0.0.1:{free_port()}"
        env[service_variable(name, "bind")] = env[service_variable(name, "target")] = address
        checks[name] = f"grpc:{address}"
    checks["dev-model"] = f"http:http://{model_bind}/v1/models"
    checks["gateway"] = f"http:http://{gateway_bind}/readyz"
    logs = KeptLog()
    stack = Stack(env, specs=[], out=logs)
    try:
        for label, port in zip(OPERATIONS, replica_ports, strict=True):
            # info: each claim and completion is logged, for reading a failed audit.
            stack.start_one(
                "operations",
                label=label,
                extra_env={"OPS_OPERATIONS_BIND": f"127.0.0.1:{port}", "OPS_LOG_LEVEL": "info"},
            )
        for name in ONE_EACH:
            stack.start_one(name)
        stack.start_one("dev-model")
        for label in AI_WORKERS:
            # info: each success is logged, which is how a second success would show.
            stack.start_one("ai-worker", label=label, extra_env={"OPS_LOG_LEVEL": "info"})
        stack.start_one("gateway")
        stack.wait_healthy(timeout=90, checks=checks.values())
        yield Drill(stack, env, f"http://{gateway_bind}", checks, logs, tmp_path / "children.log")
    finally:
        stack.stop(grace=10)


def bearer(owner: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {mint_user_token(JWT_SECRET, owner, 900)}"}


@dataclass
class Client:
    """The users' side over HTTP; every answer's status is counted."""

    gateway: str
    statuses: collections.Counter[tuple[str, int]] = field(default_factory=collections.Counter)
    problems: collections.Counter[str] = field(default_factory=collections.Counter)  # 5xx codes
    http: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=15))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def _count(self, what: str, status: int, response: httpx.Response | None = None) -> None:
        code = ""
        if response is not None and status >= 500:
            with contextlib.suppress(ValueError):
                code = str(response.json().get("code"))
        with self.lock:
            self.statuses[(what, status)] += 1
            if code:
                self.problems[f"{what} {status} {code}"] += 1

    def create_job(self, owner: str) -> str:
        response = self.http.post(f"{self.gateway}/api/jobs", json=JOB, headers=bearer(owner))
        self._count("job", response.status_code)
        assert response.status_code == 201, response.text
        return str(response.json()["id"])

    def admit(self, owner: str, job_id: str) -> str:
        """Start the job's snapshot, sending the same key again until it is acknowledged."""
        headers = {**bearer(owner), "Idempotency-Key": f"drill-{job_id}"}
        deadline = time.monotonic() + 60
        while True:
            try:
                response = self.http.post(
                    f"{self.gateway}{SNAPSHOT_ROUTE.format(id=job_id)}", json={}, headers=headers
                )
            except httpx.TransportError:
                self._count("admit", 0)
            else:
                self._count("admit", response.status_code, response)
                if response.status_code == 202:
                    return str(response.json()["operation_id"])
                assert response.status_code in (429, 503, 504), response.text
            assert time.monotonic() < deadline, f"{job_id} not admitted in 60 s"
            time.sleep(0.2)

    def read(self, owner: str, operation_id: str) -> None:
        try:
            response = self.http.get(
                f"{self.gateway}/api/operations/{operation_id}", headers=bearer(owner)
            )
        except httpx.TransportError:
            self._count("read", 0)
            return
        self._count("read", response.status_code, response)

    def close(self) -> None:
        self.http.close()


def test_random_kills_of_workers_and_replicas_lose_and_double_nothing(drill: Drill) -> None:
    db = Database(drill.env["OPS_DATABASE_URL"], pool_size=2)
    client = Client(drill.gateway)
    owners = [f"drill-user-{index}" for index in range(USERS)]
    for owner in owners:
        entitle(db, owner)
    with ThreadPoolExecutor(USERS) as pool:
        jobs = dict(
            zip(
                owners,
                pool.map(lambda o: [client.create_job(o) for _ in range(JOBS_PER_USER)], owners),
                strict=True,
            )
        )

    admitted: dict[str, str] = {}  # operation id -> owner
    lock = threading.Lock()
    reading = threading.Event()
    chaos = Chaos(
        drill.stack,
        [*OPERATIONS, *AI_WORKERS],
        seconds=KILL_SECONDS,
        every=(1.5, 3.0),
        checks=drill.checks,
        keep_one_of=OPERATIONS,
        opening=[OPERATIONS[0], AI_WORKERS[0]],
    )

    def admit_all(owner: str) -> None:
        for job_id in jobs[owner]:
            operation_id = client.admit(owner, job_id)
            with lock:
                assert admitted.setdefault(operation_id, owner) == owner
            time.sleep(ADMIT_PAUSE_SECONDS)

    def read_along() -> None:
        rng = random.Random(7)
        while not reading.wait(0.1):
            with lock:
                known = list(admitted.items())
            if known:
                operation_id, owner = rng.choice(known)
                client.read(owner, operation_id)

    def active() -> int:
        query = select(func.count()).select_from(UserOperation)
        return int(stored.scalar(db, query.where(UserOperation.state.in_(ACTIVE))) or 0)

    started = time.monotonic()
    chaos_thread = threading.Thread(target=chaos.run)
    reader = threading.Thread(target=read_along)
    chaos_thread.start()
    reader.start()
    try:
        with ThreadPoolExecutor(USERS) as pool:
            list(pool.map(admit_all, owners))
        admitted_in = time.monotonic() - started
        chaos_thread.join(KILL_SECONDS + 30)
        assert not chaos_thread.is_alive(), "the chaos did not stop"
        kills_stopped = time.monotonic()
        back_in = chaos.wait_all_up()
        active_when_kills_stopped = active()
        while (left := active()) and time.monotonic() - kills_stopped < SETTLE_SECONDS:
            time.sleep(0.25)
        settled_in = time.monotonic() - kills_stopped
    finally:
        chaos.stop.set()
        reading.set()
        chaos_thread.join(90)
        reader.join(10)
        client.close()

    successes = collections.Counter(
        str(event["operation_id"])
        for label in AI_WORKERS
        for event in drill.logs.events(label, "operation_succeeded")
    )
    found = audit(db, admitted, task_types=[STRATEGY_SNAPSHOT.name], successes=successes)
    db.dispose()
    kept = drill.logs.save(drill.log_path)
    # A completion the replica did not answer (killed): that attempt is lost, its note stays.
    refused = sum(len(drill.logs.events(label, "complete_refused")) for label in AI_WORKERS)
    wall = time.monotonic() - started
    statuses = dict(sorted(client.statuses.items()))
    report(
        f"\nkill drill: {found.acknowledged} operations admitted over HTTP by {USERS} users "
        f"in {admitted_in:.1f} s; {len(chaos.kills)} SIGKILLs in {KILL_SECONDS:.0f} s "
        f"{chaos.by_label()}, all back {back_in:.1f} s after they stopped; "
        f"{active_when_kills_stopped} active when the kills stopped, {left} active "
        f"{settled_in:.1f} s later; lost {len(found.lost)}, stuck {len(found.stuck)}, "
        f"succeeded twice {len(found.succeeded_twice)}, notifications wrong "
        f"{len(found.notifications_wrong)}, notes wrong {len(found.notes_wrong)}, over attempts "
        f"{len(found.over_attempts)}; outcomes {found.outcomes}, {found.retried} retried, "
        f"failures {found.failure_codes}, {len(found.noted_without_success)} noted but not "
        f"succeeded, {refused} completions refused; HTTP statuses {statuses} "
        f"{dict(client.problems)}; "
        f"{wall:.1f} s in all; the children's lines: {kept}"
    )

    assert chaos.error is None, chaos.error
    assert drill.stack.dead() == [], "a child died that the drill did not kill"
    labels = chaos.by_label()
    assert len(chaos.kills) >= 6, chaos.kills
    assert any(label in labels for label in OPERATIONS), labels
    assert any(label in labels for label in AI_WORKERS), labels
    assert len(admitted) == TOTAL
    assert left == 0, f"{left} operations still active {SETTLE_SECONDS:.0f} s after the kills"
    assert found.problems == {}, found.problems
    # The kills hit work in flight (else this drill proved nothing), and most work still succeeded.
    assert found.retried > 0, found.outcomes
    assert found.outcomes.get(OperationState.SUCCEEDED.value, 0) >= TOTAL * 0.9, found.outcomes
    assert sum(successes.values()) > 0
    # A replica going away is a 503 at worst, never a 500.
    assert not [key for key in client.statuses if key[1] >= 500 and key[1] not in (503, 504)]
