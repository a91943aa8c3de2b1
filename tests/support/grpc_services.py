"""Real gRPC servers on 127.0.0.1:0, run on a background event loop for tests.

Tests talk to them with ordinary synchronous gRPC stubs (threads give
concurrency) and with service credentials minted here.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import grpc

from durable_ops.ai_admission.service import SERVICE_NAME as ADMISSION
from durable_ops.ai_admission.service import AiAdmissionService
from durable_ops.api.ai_admission.v1 import ai_admission_pb2_grpc
from durable_ops.api.notifications.v1 import notifications_pb2_grpc
from durable_ops.api.operations.v1 import operations_pb2_grpc
from durable_ops.api.operator.v1 import operator_pb2_grpc
from durable_ops.api.workspace.v1 import workspace_pb2_grpc
from durable_ops.clock import Clock
from durable_ops.model.admission import Limits
from durable_ops.model.concurrency_limits import Concurrency
from durable_ops.model.scope import Role
from durable_ops.notifications.service import SERVICE_NAME as NOTIFICATIONS
from durable_ops.notifications.service import NotificationsService
from durable_ops.operations.app import OperationsApp
from durable_ops.operations.longrunning import SERVICE_NAME as LRO_SERVICE_NAME
from durable_ops.operations.longrunning import LongRunningOperations
from durable_ops.operations.longrunning import add_to_server as add_lro_to_server
from durable_ops.operations.operator import SERVICE_NAME as OPERATOR
from durable_ops.operations.operator import OperatorService
from durable_ops.operations.service import SERVICE_NAME as OPERATIONS
from durable_ops.operations.service import OperationsService
from durable_ops.operations.sweeper import sweep_once
from durable_ops.operations.tuning import TUNING, Tuning
from durable_ops.rpc.open_calls import OpenCalls
from durable_ops.rpc.server import build_server, start, stop
from durable_ops.storage.db import Database
from durable_ops.storage.operations import SweepReport
from durable_ops.workspace.service import SERVICE_NAME as WORKSPACE
from durable_ops.workspace.service import WorkspaceService
from tests.support.keys import credential, trusted


class BackgroundLoop:
    """An asyncio loop in a daemon thread; ``call`` runs a coroutine there and waits."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def call(self, coroutine: Any, timeout: float = 30) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        return future.result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.loop.close()


def metadata(
    role: Role, owner: str | None = None, *, subject: str = ""
) -> tuple[tuple[str, str], ...]:
    token = credential(role, subject=subject)
    pairs = [("authorization", f"Bearer {token}")]
    if owner is not None:
        pairs.append(("x-owner-id", owner))
    return tuple(pairs)


@dataclass
class Services:
    target: str
    db: Database
    clock: Clock
    loop: BackgroundLoop
    operations_app: OperationsApp
    open_calls: OpenCalls
    channel: grpc.Channel = field(init=False)

    def __post_init__(self) -> None:
        self.channel = grpc.insecure_channel(self.target)

    @property
    def operations(self) -> operations_pb2_grpc.OperationsServiceStub:
        return operations_pb2_grpc.OperationsServiceStub(self.channel)

    @property
    def notifications(self) -> notifications_pb2_grpc.NotificationsServiceStub:
        return notifications_pb2_grpc.NotificationsServiceStub(self.channel)

    @property
    def workspace(self) -> workspace_pb2_grpc.WorkspaceServiceStub:
        return workspace_pb2_grpc.WorkspaceServiceStub(self.channel)

    @property
    def operator(self) -> operator_pb2_grpc.OperatorServiceStub:
        return operator_pb2_grpc.OperatorServiceStub(self.channel)

    @property
    def admission(self) -> ai_admission_pb2_grpc.AiAdmissionServiceStub:
        return ai_admission_pb2_grpc.AiAdmissionServiceStub(self.channel)

    def sweep(self) -> SweepReport:
        report: SweepReport = self.loop.call(sweep_once(self.db, self.clock))
        return report


def _register(servicers: Sequence[tuple[Callable[..., None], Any]]) -> Callable[[Any], None]:
    def register(server: Any) -> None:
        for add, servicer in servicers:
            add(servicer, server)

    return register


@contextmanager
def running_services(
    db_url: str,
    clock: Clock,
    limits: Limits | None = None,
    tuning: Tuning = TUNING,
    concurrency: Mapping[str, Concurrency] | None = None,
    open_calls: OpenCalls | None = None,
) -> Iterator[Services]:
    """Every gRPC service in one server; the processes serve the same servicers one each.
    ``concurrency``: the task types' concurrency limits the claim applies (default: the
    registry's); ``open_calls``: the bound on each key's long-lived calls (default: the
    servers')."""
    loop = BackgroundLoop()
    db = Database(db_url, pool_size=16)
    operations = OperationsApp(db, clock, tuning=tuning, limits=concurrency)
    open_calls = open_calls or OpenCalls()

    async def boot() -> tuple[Any, int]:
        server, port = build_server(
            "127.0.0.1:0",
            _register(
                [
                    (
                        operations_pb2_grpc.add_OperationsServiceServicer_to_server,
                        OperationsService(operations, open_calls),
                    ),
                    (add_lro_to_server, LongRunningOperations(operations, open_calls)),
                    (
                        operator_pb2_grpc.add_OperatorServiceServicer_to_server,
                        OperatorService(operations),
                    ),
                    (
                        notifications_pb2_grpc.add_NotificationsServiceServicer_to_server,
                        NotificationsService(db, clock),
                    ),
                    (
                        workspace_pb2_grpc.add_WorkspaceServiceServicer_to_server,
                        WorkspaceService(db, clock),
                    ),
                    (
                        ai_admission_pb2_grpc.add_AiAdmissionServiceServicer_to_server,
                        AiAdmissionService(db, clock, limits or Limits()),
                    ),
                ]
            ),
            [OPERATIONS, LRO_SERVICE_NAME, OPERATOR, NOTIFICATIONS, WORKSPACE, ADMISSION],
            trusted=trusted(),
        )
        await start(server)
        return server, port

    server, port = loop.call(boot())
    services = Services(f"127.0.0.1:{port}", db, clock, loop, operations, open_calls)
    try:
        yield services
    finally:
        services.channel.close()
        loop.call(stop(server, 0.5))
        loop.call(operations.close())
        db.dispose()
        loop.close()
