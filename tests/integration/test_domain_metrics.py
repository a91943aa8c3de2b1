"""Each gRPC process serves ``durable_ops_`` metrics on its own port, and they move.

The four processes run as ``opsctl serve`` runs them (their ``main.run``), on one
background loop, on loopback ports, on both engines. Time is real: the
sweeper runs every 0.2 s and the database gauges are cached for 2 s.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client import CollectorRegistry

from durable_ops.ai_admission import main as admission_main
from durable_ops.api.ai_admission.v1 import ai_admission_pb2, ai_admission_pb2_grpc
from durable_ops.api.notifications.v1 import notifications_pb2, notifications_pb2_grpc
from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.api.operations.v1 import operations_pb2_grpc
from durable_ops.api.workspace.v1 import workspace_pb2, workspace_pb2_grpc
from durable_ops.model.scope import Role
from durable_ops.notifications import main as notifications_main
from durable_ops.operations import main as operations_main
from durable_ops.operations import metrics as operations_metrics
from durable_ops.operations.metrics import OperationsMetrics
from durable_ops.operations.tuning import TUNING
from durable_ops.settings import Settings, service_variable
from durable_ops.storage import operations
from durable_ops.storage.db import Database
from durable_ops.workspace import main as workspace_main
from tests.support.grpc_services import BackgroundLoop, metadata
from tests.support.keys import key_env
from tests.support.metrics_scrape import Scrape, scrape
from tests.support.operations_client import ALICE, TASK

OPS = "/durable_ops.api.operations.v1.OperationsService/"
GRPC_NAMES = {
    "durable_ops_grpc_server_requests_total",
    "durable_ops_grpc_server_request_duration_seconds_bucket",
    "durable_ops_grpc_server_request_duration_seconds_count",
}
EXPECTED = {
    "operations": GRPC_NAMES
    | {
        "durable_ops_operations",
        "durable_ops_operations_finished_total",
        "durable_ops_oldest_queued_operation_age_seconds",
        "durable_ops_operation_claims_total",
        "durable_ops_lease_expiries_total",
        "durable_ops_sweeper_runs_total",
        "durable_ops_sweeper_changes_total",
    },
    "notifications": GRPC_NAMES,
    "workspace": GRPC_NAMES,
    "ai_admission": GRPC_NAMES
    | {"durable_ops_admissions_total", "durable_ops_admissions_refused_total"},
}
RUNS: dict[str, Callable[[Settings], Any]] = {
    "operations": operations_main.run,
    "notifications": notifications_main.run,
    "workspace": workspace_main.run,
    "ai_admission": admission_main.run,
}


@dataclass
class Stack:
    grpc_ports: dict[str, int]
    metrics_ports: dict[str, int]

    def channel(self, name: str) -> grpc.Channel:
        return grpc.insecure_channel(f"127.0.0.1:{self.grpc_ports[name]}")

    def scrape(self, name: str) -> Scrape:
        return scrape(self.metrics_ports[name])


def _until(check: Callable[[], bool], what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def _serving(channel: grpc.Channel) -> bool:
    """Health says SERVING: the process found its database and accepts calls."""
    try:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=2
        )
    except grpc.RpcError:
        return False
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


def _distinct_ports(count: int) -> list[int]:
    """Free loopback ports, all different (held open together while chosen)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


@pytest.fixture
def stack(db_url: str) -> Iterator[Stack]:
    ports = iter(_distinct_ports(2 * len(RUNS)))
    grpc_ports = {name: next(ports) for name in RUNS}
    metrics_ports = {name: next(ports) for name in RUNS}
    settings = Settings.from_env(
        {
            "OPS_DATABASE_URL": db_url,
            **key_env(),
            "OPS_DATABASE_WAIT_SECONDS": "10",
            **{service_variable(name, "bind"): f"127.0.0.1:{grpc_ports[name]}" for name in RUNS},
            **{
                service_variable(name, "metrics_bind"): f"127.0.0.1:{metrics_ports[name]}"
                for name in RUNS
            },
        }
    )
    loop = BackgroundLoop()

    async def start() -> list[asyncio.Task[None]]:
        return [asyncio.create_task(run(settings)) for run in RUNS.values()]

    tasks: list[asyncio.Task[None]] = loop.call(start())
    running = Stack(grpc_ports, metrics_ports)
    try:
        for name in RUNS:
            with running.channel(name) as channel:
                _until(partial(_serving, channel), f"{name} did not start serving")
        yield running
    finally:

        async def stop() -> None:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        loop.call(stop())
        loop.close()


def _work(stack: Stack) -> None:
    """One operation created, claimed and completed; one left queued; one refused admission."""
    with stack.channel("operations") as channel:
        ops = operations_pb2_grpc.OperationsServiceStub(channel)
        gateway = metadata(Role.GATEWAY, ALICE)
        for key in ("m-done", "m-queued"):
            ops.CreateOperation(
                pb.CreateOperationRequest(
                    task_type=TASK,
                    idempotency_key=key,
                    subject=pb.Subject(type="job", id=key),
                    max_attempts=3,
                    retry_delay_seconds=30,
                ),
                metadata=gateway,
            )
        claimed = ops.ClaimOperation(
            pb.ClaimOperationRequest(task_types=[TASK], lease_seconds=30),
            metadata=metadata(Role.WORKER),
        ).claimed
        assert claimed.lease_token
        beat = pb.HeartbeatRequest(
            operation_id=claimed.operation.id, lease_token=claimed.lease_token, lease_seconds=30
        )
        replies = ops.Heartbeat(iter([beat]), metadata=metadata(Role.WORKER, ALICE))
        assert len(list(replies)) == 1
        ops.CompleteOperation(
            pb.CompleteOperationRequest(
                operation_id=claimed.operation.id, lease_token=claimed.lease_token
            ),
            metadata=metadata(Role.WORKER, ALICE),
        )
    with stack.channel("workspace") as channel:  # and a stream answered with context.write
        workspace_pb2_grpc.WorkspaceServiceStub(channel).GetAiSettings(
            workspace_pb2.GetAiSettingsRequest(), metadata=metadata(Role.GATEWAY, ALICE)
        )
        watch = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest())
        assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
        watch.cancel()
    with stack.channel("notifications") as channel:
        notifications_pb2_grpc.NotificationsServiceStub(channel).ListNotifications(
            notifications_pb2.ListNotificationsRequest(), metadata=metadata(Role.GATEWAY, ALICE)
        )
    with stack.channel("ai_admission") as channel:
        admission = ai_admission_pb2_grpc.AiAdmissionServiceStub(channel)
        with pytest.raises(grpc.RpcError) as refused:  # alice has no Pro plan
            admission.Admit(
                ai_admission_pb2.AdmitRequest(task_type=TASK, subject_id="job-x"),
                metadata=metadata(Role.GATEWAY, ALICE),
            )
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED


def test_every_service_exports_its_domain_metrics_and_they_move(stack: Stack) -> None:
    before = {name: stack.scrape(name) for name in RUNS}
    for name, expected in EXPECTED.items():
        assert expected <= before[name].names, (name, expected - before[name].names)
        assert {n for n in before[name].names if not n.startswith("durable_ops_")} == set()

    _work(stack)
    time.sleep(TUNING.metrics_cache_seconds + 0.2)  # past the gauges' cache
    _until(
        lambda: (
            stack.scrape("operations").value("durable_ops_sweeper_runs_total", outcome="ok") > 0
        ),
        "the sweeper ran",
    )

    operations = stack.scrape("operations")
    assert operations.value("durable_ops_operations", state="queued", task_type=TASK) == 1
    assert operations.value("durable_ops_operations", state="running", task_type=TASK) == 0
    assert operations.total("durable_ops_operations", state="succeeded") == 0  # not read back
    finished = "durable_ops_operations_finished_total"
    assert operations.value(finished, outcome="succeeded", task_type=TASK) == 1
    assert operations.total(finished) == 1
    assert operations.value("durable_ops_oldest_queued_operation_age_seconds") > 0
    assert (
        operations.value("durable_ops_operation_claims_total", task_type=TASK, route="local") == 1
    )
    create = {"method": OPS + "CreateOperation", "code": "OK"}
    assert operations.value("durable_ops_grpc_server_requests_total", **create) == 2
    complete_count = operations.value(
        "durable_ops_grpc_server_request_duration_seconds_count", method=OPS + "CompleteOperation"
    )
    assert complete_count == 1
    assert operations.value("durable_ops_lease_expiries_total") == 0
    heartbeats = {"method": OPS + "Heartbeat", "code": "OK"}
    assert operations.value("durable_ops_grpc_server_requests_total", **heartbeats) == 1

    notifications = stack.scrape("notifications")
    listed = notifications.total(
        "durable_ops_grpc_server_requests_total",
        method="/durable_ops.api.notifications.v1.NotificationsService/ListNotifications",
    )
    assert listed == 1

    admission = stack.scrape("ai_admission")
    assert admission.total("durable_ops_admissions_refused_total") == 1
    assert admission.value("durable_ops_admissions_total", outcome="admitted") == 0
    assert admission.total("durable_ops_grpc_server_requests_total", code="PERMISSION_DENIED") == 1

    workspace = stack.scrape("workspace")
    settings_read = {
        "method": "/durable_ops.api.workspace.v1.WorkspaceService/GetAiSettings",
        "code": "OK",
    }
    assert workspace.value("durable_ops_grpc_server_requests_total", **settings_read) == 1
    checks = workspace.total(
        "durable_ops_grpc_server_requests_total", method="/grpc.health.v1.Health/Check"
    )
    assert checks >= 1, "health checks are counted too"
    watched = {"method": "/grpc.health.v1.Health/Watch", "code": "CANCELLED"}
    _until(
        lambda: (
            stack.scrape("workspace").value("durable_ops_grpc_server_requests_total", **watched)
            == 1
        ),
        "the cancelled health watch was counted",
    )


def test_the_oldest_queued_age_counts_an_operation_from_when_it_is_due(
    database: Database,
) -> None:
    """One scheduled for later is queued but not waiting: it would age from its create
    and look like a stuck queue for as long as its schedule lies ahead."""
    now = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)

    def create(key: str, at: datetime, not_before: datetime | None = None) -> None:
        request = operations.CreateRequest(TASK, key, "job", key, not_before=not_before)
        database.run(lambda tx: operations.create(tx, request, at), owner_id=ALICE)

    def gauge(name: str, **labels: str) -> float | None:
        registry = CollectorRegistry()  # a fresh one: nothing cached
        OperationsMetrics(registry, database, lambda: now)
        return registry.get_sample_value(name, labels)

    age = "durable_ops_oldest_queued_operation_age_seconds"
    create("scheduled", now - timedelta(hours=2), not_before=now + timedelta(days=1))
    assert gauge(age) == 0  # queued, but nothing waits yet
    create("due", now - timedelta(hours=1))
    create("newer", now - timedelta(minutes=5))
    assert gauge(age) == 3600
    assert gauge("durable_ops_operations", state="queued", task_type=TASK) == 3


def test_a_drained_task_type_keeps_its_queue_series_at_zero(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once its last operation finished, a task type's series read 0, not "no data": a
    graph of an emptied queue drops to zero and ``sum(...) > N`` stays evaluable."""
    monkeypatch.setattr(operations_metrics, "TUNING", replace(TUNING, metrics_cache_seconds=1e-6))
    now = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
    registry = CollectorRegistry()
    OperationsMetrics(registry, database, lambda: now)

    def queued() -> float | None:
        return registry.get_sample_value(
            "durable_ops_operations", {"state": "queued", "task_type": TASK}
        )

    assert queued() is None  # never seen: no series
    request = operations.CreateRequest(TASK, "drained", "job", "drained")
    created, _ = database.run(lambda tx: operations.create(tx, request, now), owner_id=ALICE)
    assert queued() == 1
    database.run(lambda tx: operations.cancel(tx, created.id, now), owner_id=ALICE)
    assert queued() == 0
