"""A database that is away is an expected state (issue 20, item 3; ADR 16).

Real ``opsctl serve`` processes, each in its own temporary cwd and
environment: pointed at a MariaDB port where nothing listens they answer
health NOT_SERVING, refuse calls with UNAVAILABLE and write one line per
attempt, then exit with code 4 and one line; pointed at a throwaway
``mariadbd`` of the test's own they turn SERVING when it comes up, and their
health (and the gateway's ``/readyz``) follows it down and up again.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from sqlalchemy.engine import make_url

from durable_ops.api.operations.v1 import operations_pb2 as ops_pb
from durable_ops.api.operations.v1 import operations_pb2_grpc as ops_grpc
from durable_ops.cli import EXIT_DATABASE_UNAVAILABLE, GRPC_SERVICES
from durable_ops.gateway.backends import KNOWN_BACKENDS
from durable_ops.model.scope import Role
from durable_ops.rpc.errors import ERROR_CODE
from durable_ops.rpc.server import build_server, serve
from durable_ops.settings import service_variable
from durable_ops.storage import migrate
from durable_ops.storage.availability import DatabaseReadiness, open_when_reachable
from durable_ops.storage.db import Database
from tests.support.gateway import gateway_client, make_app
from tests.support.grpc_services import metadata
from tests.support.keys import key_env, trusted
from tests.support.ports import free_port, refusing_port
from tests.support.throwaway_mariadb import ThrowawayMariadb, throwaway_mariadb

pytestmark = pytest.mark.slow

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
HEALTH_NAME = {target: KNOWN_BACKENDS[target.replace("-", "_")][1] for target in GRPC_SERVICES}
GIVE_UP = re.compile(
    r"^opsctl serve (?P<target>\S+): the database (?P<database>\S+) \(from OPS_DATABASE_URL\)"
    r" did not answer within (?P<bound>\S+) s"
    r" \(OPS_DATABASE_WAIT_SECONDS; (?P<attempts>\d+) attempts?, the last: .+\); exiting$"
)


@dataclass
class Served:
    """One ``opsctl serve`` child; its stderr (logs, then any last word) kept line by line."""

    process: subprocess.Popen[str]
    address: str
    lines: list[str] = field(default_factory=list)
    last_error: Any = None  # the grpc.RpcError of the last failed call

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in list(self.lines) if line.startswith("{")]

    def events(self, name: str) -> list[dict[str, Any]]:
        return [record for record in self.records() if record.get("event") == name]

    def health(self, service: str = "") -> int | None:
        """The status health answers, or None when nothing answers."""
        with grpc.insecure_channel(self.address) as channel:
            try:
                reply = health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(service=service), timeout=2
                )
            except grpc.RpcError:
                return None
        return int(reply.status)

    def list_operations(self) -> grpc.StatusCode:
        """OK, or the status a ListOperations call failed with."""
        with grpc.insecure_channel(self.address) as channel:
            stub = ops_grpc.OperationsServiceStub(channel)
            try:
                stub.ListOperations(
                    ops_pb.ListOperationsRequest(),
                    metadata=metadata(Role.GATEWAY, "alice"),
                    timeout=10,
                )
            except grpc.RpcError as error:
                self.last_error = error
                return error.code()
        return grpc.StatusCode.OK


@pytest.fixture
def serve_target(tmp_path: Path) -> Iterator[Callable[..., Served]]:
    started: list[Served] = []

    def start(target: str, database_url: str, **env: str) -> Served:
        address = f"127.0.0.1:{free_port()}"
        environment = {
            **_inherited(),
            "OPS_DATABASE_URL": database_url,
            service_variable(target, "bind"): address,
            **key_env(),  # the keys this test signs with
            "OPS_LOG_JSON": "true",
            **env,
        }
        cwd = tmp_path / target
        cwd.mkdir(exist_ok=True)
        process = subprocess.Popen(
            [sys.executable, "-m", "durable_ops.cli", "serve", target],
            env=environment,
            cwd=cwd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        served = Served(process, address)
        threading.Thread(target=_keep_lines, args=(process, served.lines), daemon=True).start()
        started.append(served)
        return served

    yield start
    for served in started:
        if served.process.poll() is None:
            served.process.kill()
            served.process.wait(10)


def _inherited() -> Mapping[str, str]:
    """The environment without any OPS_* setting of the caller's."""
    return {key: value for key, value in os.environ.items() if not key.startswith("OPS_")}


def _keep_lines(process: subprocess.Popen[str], lines: list[str]) -> None:
    assert process.stderr is not None
    for line in process.stderr:
        lines.append(line.rstrip("\n"))


def _until(check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f} s"
        time.sleep(0.1)


def _nothing_listens() -> str:
    return f"mysql+pymysql://root@127.0.0.1:{refusing_port()}/ops"


@pytest.mark.parametrize("target", ["operations", "notifications", "workspace", "ai-admission"])
def test_a_service_without_its_database_waits_not_serving_then_exits_with_one_line(
    serve_target: Callable[..., Served], target: str
) -> None:
    served_url = _nothing_listens()
    served = serve_target(target, served_url, OPS_DATABASE_WAIT_SECONDS="3")
    _until(lambda: served.health() is not None, "health answers")
    # Every name the server carries says NOT_SERVING while it waits.
    assert served.health() == NOT_SERVING
    assert served.health(HEALTH_NAME[target]) == NOT_SERVING
    if target == "operations":  # other calls are refused, retryably, without reaching a handler
        assert served.list_operations() == grpc.StatusCode.UNAVAILABLE
        trailers = dict(served.last_error.trailing_metadata() or ())
        assert trailers[ERROR_CODE] == "starting"
    assert served.process.wait(60) == EXIT_DATABASE_UNAVAILABLE
    _until(lambda: bool(served.lines) and not served.lines[-1].startswith("{"), "the last word")
    last = served.lines[-1]
    given_up = GIVE_UP.match(last)
    assert given_up is not None, last
    assert given_up["target"] == target
    assert given_up["database"] == served_url
    assert given_up["bound"] == "3"
    assert "Connection refused" in last
    # One log line per attempt, numbered, the last included; no traceback anywhere.
    attempts = served.events("database_unreachable")
    assert [record["attempt"] for record in attempts] == list(
        range(1, int(given_up["attempts"]) + 1)
    )
    assert len(attempts) >= 2  # pauses start at 0.1 s: a bound of 3 s is many attempts
    assert all(record["level"] == "warning" for record in attempts)
    assert attempts[-1]["retry_in_seconds"] is None
    assert all("Traceback" not in line for line in served.lines)
    assert all(line.startswith("{") for line in served.lines[:-1])  # logs, then one line


def test_sigterm_during_the_wait_stops_the_service_cleanly(
    serve_target: Callable[..., Served],
) -> None:
    served = serve_target("operations", _nothing_listens(), OPS_DATABASE_WAIT_SECONDS="120")
    _until(lambda: served.health() == NOT_SERVING, "NOT_SERVING while it waits")
    served.process.send_signal(signal.SIGTERM)
    assert served.process.wait(60) == 0  # a stop asked for, not a failure
    assert served.events("grpc_stopped") != []
    assert all("Traceback" not in line for line in served.lines)


def test_a_zero_wait_asks_once(serve_target: Callable[..., Served]) -> None:
    served = serve_target("workspace", _nothing_listens(), OPS_DATABASE_WAIT_SECONDS="0")
    assert served.process.wait(60) == EXIT_DATABASE_UNAVAILABLE
    _until(lambda: bool(served.lines) and not served.lines[-1].startswith("{"), "the last word")
    assert "; 1 attempt, the last: " in served.lines[-1]
    assert len(served.events("database_unreachable")) == 1


def test_a_database_that_refuses_us_ends_the_wait_at_once(
    serve_target: Callable[..., Served], mariadb_server_url: str
) -> None:
    """No such database: waiting would not cure it, so no minute of attempts."""
    server = make_url(mariadb_server_url)
    url = server.set(database="ops_no_such_database_here").render_as_string(hide_password=False)
    served = serve_target("notifications", url)  # the default wait: a minute
    assert served.process.wait(30) == EXIT_DATABASE_UNAVAILABLE
    _until(lambda: bool(served.lines) and not served.lines[-1].startswith("{"), "the last word")
    shown = make_url(url).render_as_string(hide_password=True)  # a password is not printed
    assert served.lines[-1].startswith(
        f"opsctl serve notifications: the database {shown} (from OPS_DATABASE_URL) refused us: "
    )
    assert "1049" in served.lines[-1]
    assert served.events("database_unreachable") == []


def test_on_sqlite_a_service_serves_at_once(
    serve_target: Callable[..., Served], tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'ops.sqlite3'}"
    migrate.upgrade(url)
    served = serve_target("operations", url)
    _until(lambda: served.health() == SERVING, "SERVING")
    assert served.list_operations() == grpc.StatusCode.OK
    assert served.events("database_unreachable") == []
    served.process.send_signal(signal.SIGTERM)
    assert served.process.wait(60) == 0


@pytest.fixture(scope="module")
def own_mariadb() -> Iterator[ThrowawayMariadb]:
    """A server of this module's own with a migrated database ``ops``, left stopped."""
    with throwaway_mariadb() as server:
        server.start()
        server.execute("CREATE DATABASE ops CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
        migrate.upgrade(server.url("ops"))
        server.stop()
        yield server


def test_a_service_serves_once_its_database_answers_and_follows_it_down_and_up(
    serve_target: Callable[..., Served], own_mariadb: ThrowawayMariadb
) -> None:
    served = serve_target("operations", own_mariadb.url("ops"), OPS_DATABASE_WAIT_SECONDS="120")
    _until(lambda: len(served.events("database_unreachable")) >= 2, "attempts logged")
    assert served.health() == NOT_SERVING
    own_mariadb.start()
    _until(lambda: served.health() == SERVING, "SERVING once the database answers")
    assert served.health(HEALTH_NAME["operations"]) == SERVING
    assert served.list_operations() == grpc.StatusCode.OK
    assert len(served.events("database_reachable")) == 1
    assert served.events("grpc_serving") != []

    own_mariadb.stop()  # an outage while running: health follows within about a second
    _until(lambda: served.health() == NOT_SERVING, "NOT_SERVING while the database is away")
    assert served.health(HEALTH_NAME["operations"]) == NOT_SERVING
    assert served.list_operations() == grpc.StatusCode.UNAVAILABLE
    assert served.process.poll() is None  # an outage is no reason to exit

    own_mariadb.start()
    _until(lambda: served.health() == SERVING, "SERVING again once it is back")
    assert served.list_operations() == grpc.StatusCode.OK
    # While running, the changes are logged, not every probe: one line down, one line back
    # (the wait's own lines carry the attempt numbers).
    changes = [
        record["event"]
        for record in served.records()
        if record.get("event") in {"database_unreachable", "database_reachable"}
        and "attempt" not in record
        and "attempts" not in record
    ]
    assert changes == ["database_unreachable", "database_reachable"]

    served.process.send_signal(signal.SIGTERM)
    assert served.process.wait(60) == 0
    own_mariadb.stop()


def test_readyz_follows_the_database_of_the_backends(own_mariadb: ThrowawayMariadb) -> None:
    """The gateway's /readyz asks the backends' health, and their health asks the database."""
    own_mariadb.start()
    names = [health_service for _field, health_service in KNOWN_BACKENDS.values()]

    async def scenario() -> None:
        db = Database(own_mariadb.url("ops"), pool_size=2)
        server, port = build_server(
            "127.0.0.1:0",
            lambda _server: None,
            names,
            trusted=trusted(),
            ready=DatabaseReadiness(db),
        )
        serving = asyncio.create_task(
            serve(server, grace=0.1, prepare=lambda: open_when_reachable(db, 30.0))
        )
        try:
            async with gateway_client(make_app(f"127.0.0.1:{port}")) as client:

                async def ready_status() -> int:
                    return (await client.get("/readyz")).status_code

                async def backends() -> set[str]:
                    return set((await client.get("/readyz")).json()["backends"].values())

                await _until_async(lambda: ready_status(), 200, "ready with the database up")
                await asyncio.to_thread(own_mariadb.stop)
                await _until_async(lambda: ready_status(), 503, "not ready while it is away")
                # Each backend's health reads an answer up to a second old: a /readyz whose
                # checks straddle a new probe names some still serving (a CI run saw it).
                await _until_async(backends, {"not_serving"}, "every backend not serving")
                await asyncio.to_thread(own_mariadb.start)
                await _until_async(lambda: ready_status(), 200, "ready again once it is back")
        finally:
            serving.cancel()
            with pytest.raises(asyncio.CancelledError):
                await serving
            db.dispose()

    asyncio.run(scenario())
    own_mariadb.stop()


async def _until_async(
    check: Callable[[], Any], wanted: object, what: str, timeout: float = 60.0
) -> None:
    deadline = time.monotonic() + timeout
    while (await check()) != wanted:
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f} s"
        await asyncio.sleep(0.1)


def test_readiness_is_not_fooled_by_a_pooled_connection_the_server_dropped(
    migrated_mariadb_url: str,
) -> None:
    """A ``KILL`` of the service's idle connections (as a server restart does) made the next
    probe say the database was unreachable while it answered."""
    db = Database(migrated_mariadb_url, pool_size=1)
    try:
        with db.engine.connect() as connection:
            pooled = connection.exec_driver_sql("SELECT CONNECTION_ID()").scalar_one()
        with Database(migrated_mariadb_url, pool_size=1).engine.connect() as admin:
            admin.exec_driver_sql(f"KILL {int(pooled)}")
        readiness = DatabaseReadiness(db)
        assert asyncio.run(readiness()) is True
    finally:
        db.dispose()
