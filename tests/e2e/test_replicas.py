"""Two replicas of every process on one MariaDB, one of each killed half way.

Real processes on loopback (``durable_ops.stack.children.Stack``): two each of Operations,
Notifications, Workspace and AI Admission, two AI workers, two gateways and
the development model. Clients reach a service's replicas through one target
naming both (``ipv4:127.0.0.1:P1,127.0.0.1:P2``) with round_robin, exactly as
an operator configures them (docs/operations.md, "Scaling").

The test admits 500 strategy snapshots while a monitor samples the number of
active AI operations in the database, SIGKILLs one replica of every process
when half are admitted, and ends with every operation terminal, exactly one
workspace note and one notification per success, one notification per other
outcome, and the capacity limits never exceeded.

Admissions go through both gateways over HTTP (``POST
/api/jobs/{id}/strategy-snapshot``), in turn, the way a load balancer would
send them; a request that finds its gateway dead goes to the other one.
"""

from __future__ import annotations

import collections
import itertools
import random
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import grpc
import httpx
import pytest
from sqlalchemy import func, select

from durable_ops.api.workspace.v1 import workspace_pb2_grpc
from durable_ops.gateway.auth import mint_user_token
from durable_ops.model.states import ACTIVE_STATES, TERMINAL_STATES, OperationState
from durable_ops.model.tasks import TASKS
from durable_ops.rpc.client import CHANNEL_OPTIONS
from durable_ops.settings import service_variable
from durable_ops.stack.children import Stack
from durable_ops.storage.db import Database
from durable_ops.storage.schema import AiWorkspaceNote, UserNotification, UserOperation
from tests.conftest import EmptyDatabase
from tests.support import stored
from tests.support.ai_stack import LogTee
from tests.support.keys import key_env
from tests.support.ports import free_port
from tests.support.workspace_client import create_job, entitle

pytestmark = [pytest.mark.slow, pytest.mark.mariadb]

JWT_SECRET = "replica-test-jwt-secret-0123456789abcdef"
GRPC_SERVICES = ("operations", "notifications", "workspace", "ai-admission")
REPLICAS = 2
USERS = 25
JOBS_PER_USER = 20
TOTAL = USERS * JOBS_PER_USER
USER_LIMIT, GLOBAL_LIMIT = 3, 16
DRIVERS = 8
KILLED = [*(f"{name}-1" for name in GRPC_SERVICES), "ai-worker-1", "gateway-1"]
SNAPSHOT_ROUTE = "/api/jobs/{id}/strategy-snapshot"
SETTLE_TIMEOUT_SECONDS = 120.0
WORKER_ENV = {
    "OPS_WORKERS_AI_OPERATIONS_ENABLED": "true",
    "OPS_WORKER_CONCURRENCY": "4",
    "OPS_WORKER_LEASE_SECONDS": "5",
    "OPS_WORKER_POLL_SECONDS": "0.05",
    "OPS_WORKER_TASK_TIMEOUT_SECONDS": "20",
    # Two workers on one host: a shared host store would lock the second out.
    "OPS_HOST_STORE_DIR": "",
    "OPS_AI_EXTERNAL_URL": "",
}
ACTIVE = [state.value for state in ACTIVE_STATES]
TERMINAL = {state.value for state in TERMINAL_STATES}
AI_TASK_TYPES = list(TASKS.names())


@dataclass
class Cluster:
    stack: Stack
    env: dict[str, str]
    ports: dict[str, list[int]]
    gateways: list[str]
    logs: LogTee

    def target(self, service: str) -> str:
        return self.env[service_variable(service, "target")]


@pytest.fixture
def cluster(empty_mariadb: EmptyDatabase) -> Iterator[Cluster]:
    database_url = empty_mariadb()
    processes = [*GRPC_SERVICES, "gateway", "gateway-metrics"]
    ports = {name: [free_port() for _ in range(REPLICAS)] for name in processes}
    model_bind = f"127.0.0.1:{free_port()}"
    env = {
        "OPS_DATABASE_URL": database_url,
        **key_env(),  # the gateway and the AI worker get their own key from it
        "OPS_JWT_SECRET": JWT_SECRET,
        "OPS_LOG_LEVEL": "warning",
        "OPS_LOG_JSON": "true",
        "OPS_AI_USER_LIMIT": str(USER_LIMIT),
        "OPS_AI_GLOBAL_LIMIT": str(GLOBAL_LIMIT),
        "OPS_DEV_MODEL_BIND": model_bind,
        "OPS_AI_LOCAL_URL": f"http://{model_bind}/v1",
        **WORKER_ENV,
    }
    for name in GRPC_SERVICES:
        # The operator's form for several replicas: one target naming every address.
        env[service_variable(name, "target")] = "ipv4:" + ",".join(
            f"127.0.0.1:{port}" for port in ports[name]
        )
    logs = LogTee()
    stack = Stack(env, specs=[], out=logs)
    gateways = [f"http://127.0.0.1:{port}" for port in ports["gateway"]]
    try:
        for name in GRPC_SERVICES:
            for index, port in enumerate(ports[name]):
                bind = {service_variable(name, "bind"): f"127.0.0.1:{port}"}
                stack.start_one(name, label=f"{name}-{index}", extra_env=bind)
        stack.start_one("dev-model")
        for index in range(REPLICAS):
            # info: each success is logged, so the test sees that both workers worked.
            stack.start_one(
                "ai-worker", label=f"ai-worker-{index}", extra_env={"OPS_LOG_LEVEL": "info"}
            )
            stack.start_one(
                "gateway",
                label=f"gateway-{index}",
                extra_env={
                    "OPS_GATEWAY_BIND": f"127.0.0.1:{ports['gateway'][index]}",
                    "OPS_GATEWAY_METRICS_BIND": f"127.0.0.1:{ports['gateway-metrics'][index]}",
                },
            )
        stack.wait_healthy(
            timeout=90,
            checks=[
                *(f"grpc:127.0.0.1:{port}" for name in GRPC_SERVICES for port in ports[name]),
                f"http:http://{model_bind}/v1/models",
                *(f"http:{url}/readyz" for url in gateways),
            ],
        )
        yield Cluster(stack, env, ports, gateways, logs)
    finally:
        stack.stop(grace=10)


# ---- admitting ----------------------------------------------------------------------------


class Retry(Exception):
    """The request got no usable answer (a replica went away): send it again later."""


class HttpAdmitter:
    """Through the gateways in turn; a gateway that does not answer is skipped."""

    def __init__(self, gateways: list[str]) -> None:
        self._gateways = gateways
        self._turn = itertools.count()
        self._client = httpx.Client(timeout=10)
        self.failovers = 0

    def admit(self, owner: str, job_id: str) -> str | None:
        """The operation id, or ``None`` when over capacity (429)."""
        first = next(self._turn)
        for offset in range(len(self._gateways)):
            gateway = self._gateways[(first + offset) % len(self._gateways)]
            try:
                response = self._client.post(
                    f"{gateway}{SNAPSHOT_ROUTE.format(id=job_id)}",
                    json={},
                    headers={**bearer(owner), "Idempotency-Key": f"snapshot-{job_id}"},
                )
            except httpx.TransportError:
                self.failovers += 1
                continue
            if response.status_code == 429:
                assert response.headers.get("retry-after"), response.headers
                return None
            if response.status_code in (502, 503, 504):
                raise Retry(str(response.status_code))
            assert response.status_code == 202, response.text
            operation_id = str(response.json()["operation_id"])
            assert response.headers["location"].endswith(f"/api/operations/{operation_id}")
            return operation_id
        raise Retry("no gateway answered")

    def close(self) -> None:
        self._client.close()


def bearer(owner: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {mint_user_token(JWT_SECRET, owner, 600)}"}


# ---- watching -----------------------------------------------------------------------------


@dataclass
class CapacityMonitor:
    """Samples the active AI operations per owner until stopped; keeps the maxima."""

    db: Database
    max_global: int = 0
    max_user: int = 0
    samples: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def sample(self) -> dict[str, int]:
        query = (
            select(UserOperation.owner_user_id, func.count())
            .where(UserOperation.state.in_(ACTIVE), UserOperation.task_type.in_(AI_TASK_TYPES))
            .group_by(UserOperation.owner_user_id)
        )
        return {str(owner): int(count) for owner, count in stored.rows(self.db, query)}

    def run(self) -> None:
        while not self.stop.is_set():
            per_user = self.sample()
            self.max_global = max(self.max_global, sum(per_user.values()))
            self.max_user = max(self.max_user, max(per_user.values(), default=0))
            self.samples += 1
            self.stop.wait(0.03)


@dataclass
class GatewayReader:
    """Reads through every gateway in turn while the test runs; counts answers by status."""

    gateways: list[str]
    owners: list[str]
    statuses: collections.Counter[tuple[str, str, int]] = field(default_factory=collections.Counter)
    phase: str = "before"
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        rng = random.Random(3)
        with httpx.Client(timeout=5) as client:
            for gateway in itertools.cycle(self.gateways):
                if self.stop.wait(0.05):
                    return
                owner = rng.choice(self.owners)
                try:
                    status = client.get(
                        f"{gateway}/api/notifications/unread-count", headers=bearer(owner)
                    ).status_code
                except httpx.TransportError:
                    status = 0  # nothing listens: the killed gateway
                self.statuses[(self.phase, gateway, status)] += 1


def _established(port: int) -> int:
    """Established TCP connections accepted on ``port`` (Linux; gRPC uses v4-mapped v6)."""
    count = 0
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(path) as table:
            next(table)
            for line in table:
                local, _remote, state = line.split()[1:4]
                if state == "01" and int(local.rpartition(":")[2], 16) == port:
                    count += 1
    return count


# ---- the test -----------------------------------------------------------------------------


def test_replicas_survive_losing_one_of_each_and_never_exceed_capacity(
    cluster: Cluster,
) -> None:
    db = Database(cluster.env["OPS_DATABASE_URL"], pool_size=4)
    owners = [f"replica-user-{index:02d}" for index in range(USERS)]
    workspace_channel = grpc.insecure_channel(cluster.target("workspace"), options=CHANNEL_OPTIONS)
    workspace = workspace_pb2_grpc.WorkspaceServiceStub(workspace_channel)
    for owner in owners:
        entitle(db, owner)
    with ThreadPoolExecutor(DRIVERS) as pool:
        job_lists = list(
            pool.map(lambda o: [create_job(workspace, o) for _ in range(JOBS_PER_USER)], owners)
        )
    workspace_channel.close()
    assert sum(len(jobs) for jobs in job_lists) == TOTAL

    admitter = HttpAdmitter(cluster.gateways)
    monitor = CapacityMonitor(db)
    reader = GatewayReader(cluster.gateways, owners)
    admitted: dict[str, tuple[str, str]] = {}  # operation id -> (owner, job)
    refusals = collections.Counter[str]()
    lock = threading.Lock()
    half_way = threading.Event()
    # Each driver admits one user's jobs back to back: the user limit binds at once, and
    # eight users wanting three each (24) press the global limit (16).
    pending = collections.deque(zip(owners, job_lists, strict=True))

    def admit(owner: str, job: str) -> None:
        while True:
            try:
                operation_id = admitter.admit(owner, job)
                refusal = "over capacity" if operation_id is None else ""
            except Retry as retry:
                operation_id, refusal = None, f"no answer ({retry})"
            with lock:
                if operation_id is not None:
                    assert admitted.setdefault(operation_id, (owner, job)) == (owner, job)
                    if len(admitted) >= TOTAL // 2:
                        half_way.set()
                    return
                refusals[refusal] += 1
            time.sleep(0.05)  # then the same key again: never admitted twice

    def drive() -> None:
        while True:
            with lock:
                if not pending:
                    return
                owner, jobs = pending.popleft()
            for job in jobs:
                admit(owner, job)

    threads = [threading.Thread(target=monitor.run), threading.Thread(target=reader.run)]
    for thread in threads:
        thread.start()
    started = time.monotonic()
    try:
        with ThreadPoolExecutor(DRIVERS) as pool:
            drivers = [pool.submit(drive) for _ in range(DRIVERS)]
            deadline = time.monotonic() + SETTLE_TIMEOUT_SECONDS
            while not half_way.wait(0.1):
                for driver in drivers:
                    if driver.done():
                        driver.result()  # a driver that failed fails the test now
                assert time.monotonic() < deadline, f"admitted {len(admitted)} of {TOTAL}"
            killed_at = time.monotonic() - started
            worked_before_kill = {
                label: len(cluster.logs.events(label, "operation_succeeded"))
                for label in ("ai-worker-0", "ai-worker-1")
            }
            connections = {
                name: [_established(port) for port in cluster.ports[name]] for name in GRPC_SERVICES
            }
            reader.phase = "kill"
            for label in KILLED:
                cluster.stack.kill(label)
            time.sleep(1.0)
            reader.phase = "after"
            for driver in drivers:
                driver.result(timeout=SETTLE_TIMEOUT_SECONDS)
        admitted_at = time.monotonic() - started

        def unsettled() -> int:
            query = select(func.count()).where(UserOperation.state.in_(ACTIVE))
            return int(stored.scalar(db, query.select_from(UserOperation)) or 0)

        deadline = time.monotonic() + SETTLE_TIMEOUT_SECONDS
        while (left := unsettled()) and time.monotonic() < deadline:
            time.sleep(0.2)
        wall = time.monotonic() - started
    finally:
        monitor.stop.set()
        reader.stop.set()
        for thread in threads:
            thread.join(10)
        admitter.close()

    rows = stored.rows(
        db,
        select(UserOperation.id, UserOperation.state, UserOperation.attempt).where(
            UserOperation.task_type.in_(AI_TASK_TYPES)
        ),
    )
    states = {str(row.id): str(row.state) for row in rows}
    retried = sum(1 for row in rows if row.attempt > 1)
    notes = collections.Counter(
        str(operation_id)
        for (operation_id,) in stored.rows(db, select(AiWorkspaceNote.operation_id))
    )
    notices = collections.Counter(
        str(operation_id)
        for (operation_id,) in stored.rows(db, select(UserNotification.operation_id))
    )
    db.dispose()
    outcomes = collections.Counter(str(state) for state in states.values())
    succeeded = {i for i, state in states.items() if state == OperationState.SUCCEEDED.value}
    print(
        f"\nreplicas: {TOTAL} operations admitted over HTTP in {admitted_at:.1f} s, "
        f"all settled in {wall:.1f} s; killed {', '.join(KILLED)} at {killed_at:.1f} s; "
        f"outcomes {dict(outcomes)}, {retried} needed more than one attempt; "
        f"refusals {dict(refusals)}, {admitter.failovers} sent to the other gateway; "
        f"connections per replica {connections}; "
        f"successes per worker before the kill {worked_before_kill}; "
        f"max active {monitor.max_global}/{GLOBAL_LIMIT} global, "
        f"{monitor.max_user}/{USER_LIMIT} per user over {monitor.samples} samples; "
        f"gateway reads {dict(reader.statuses)}"
    )

    # Nothing else died, and nothing was admitted twice.
    assert sorted(cluster.stack.dead()) == sorted(KILLED)
    assert len(admitted) == TOTAL
    assert set(states) == set(admitted)
    # Every operation reached a terminal state, most of them success.
    assert left == 0, f"{left} operations still active after {SETTLE_TIMEOUT_SECONDS:.0f} s"
    assert set(outcomes) <= TERMINAL, outcomes
    assert len(succeeded) >= TOTAL * 0.98, outcomes
    # One note and one notification per success; one notification per other outcome.
    assert {i: notes[i] for i in succeeded} == dict.fromkeys(succeeded, 1)
    assert set(notes) == succeeded, "a note without a successful operation"
    assert dict(notices) == dict.fromkeys(states, 1)
    # Both workers were doing the work when one was killed.
    assert all(count > 0 for count in worked_before_kill.values()), worked_before_kill
    # Round robin: clients held a connection to every replica, not just the first address.
    assert all(count > 0 for counts in connections.values() for count in counts), connections
    # Capacity held across the admission replicas, and was actually pressed against.
    assert monitor.samples > 50
    assert monitor.max_global <= GLOBAL_LIMIT
    assert monitor.max_user <= USER_LIMIT
    assert refusals["over capacity"] > 0
    # Both gateways served before the kill; the survivor after it, never with a 5xx.
    survivor, killed_gateway = cluster.gateways[0], cluster.gateways[1]
    assert reader.statuses[("before", survivor, 200)] > 0
    assert reader.statuses[("before", killed_gateway, 200)] > 0
    assert reader.statuses[("after", survivor, 200)] > 0
    assert reader.statuses[("after", killed_gateway, 200)] == 0
    assert not [key for key in reader.statuses if key[0] != "kill" and key[2] >= 500]
    metrics = f"http://127.0.0.1:{cluster.ports['gateway-metrics'][0]}/metrics"
    _check_the_survivor_over_http(survivor, metrics, admitted)


def _check_the_survivor_over_http(
    gateway: str, metrics_url: str, admitted: dict[str, tuple[str, str]]
) -> None:
    """The surviving gateway reaches the surviving replicas for reads, lists and health."""
    assert httpx.get(f"{gateway}/readyz", timeout=10).status_code == 200
    by_owner: dict[str, set[str]] = collections.defaultdict(set)
    for operation_id, (owner, _job) in admitted.items():
        by_owner[owner].add(operation_id)
    with httpx.Client(timeout=10) as client:
        for owner in sorted(by_owner)[:5]:
            listed = client.get(
                f"{gateway}/api/operations", params={"page_size": 100}, headers=bearer(owner)
            )
            assert listed.status_code == 200, listed.text
            items = listed.json()["items"]
            assert {item["id"] for item in items} == by_owner[owner]
            assert {item["state"] for item in items} <= TERMINAL
            unread = client.get(f"{gateway}/api/notifications/unread-count", headers=bearer(owner))
            assert unread.json() == {"count": len(by_owner[owner])}
        assert client.get(f"{gateway}/metrics").status_code == 404  # never where users are
        metrics = client.get(metrics_url).text
    assert 'route="/api/operations"' in metrics
