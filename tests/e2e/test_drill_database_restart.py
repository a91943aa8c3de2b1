"""Fault drill: SIGKILL the MariaDB server under load, start it again, and lose nothing.

The server is the test's own (``ThrowawayMariadb``: its own datadir in a
temporary folder, a free loopback port). Operations,
Workspace and the gateway run on it as real processes. Three gRPC clients
create operations (each with its own idempotency keys) and one HTTP client
creates jobs and lists operations through the gateway, without pause, while
the server is SIGKILLed, left down for a few seconds and started again on the
same datadir (InnoDB crash recovery). Afterwards:

- every create that was acknowledged is in the database, under its id and key,
  and every create sent again (acknowledged or not) answers the same operation
  or makes it once;
- a call during the outage failed with UNAVAILABLE (``database_unavailable``)
  over gRPC and 503 over HTTP, never INTERNAL or 500, and no service died;
- the recovery time (from the restart to the first successful call) is printed.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import httpx
import pytest
from sqlalchemy import select

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.api.operations.v1 import operations_pb2_grpc as pb_grpc
from durable_ops.cli import GRPC_SERVICES
from durable_ops.gateway.auth import mint_user_token
from durable_ops.model.scope import Role
from durable_ops.settings import Settings, service_variable
from durable_ops.stack.children import Stack, process_specs
from durable_ops.storage import migrate
from durable_ops.storage.db import Database
from durable_ops.storage.schema import Job, UserOperation
from tests.support.ai_stack import JOB
from tests.support.drills import KeptLog
from tests.support.figures import report
from tests.support.grpc_services import metadata
from tests.support.keys import key_env
from tests.support.operations_client import failure_of
from tests.support.ports import free_port
from tests.support.stored import rows as read_rows
from tests.support.throwaway_mariadb import ThrowawayMariadb, throwaway_mariadb

pytestmark = [pytest.mark.slow, pytest.mark.mariadb]

JWT_SECRET = "drill-restart-jwt-secret-0123456789abcdef"
TASK_TYPE = "drill.restart"
GRPC_CLIENTS = 3
HTTP_OWNER = "restart-http-user"
BEFORE_KILL = 30  # acknowledged gRPC creates before the kill
OUTAGE_SECONDS = 4.0  # the server stays down this long
AFTER_RECOVERY_SECONDS = 4.0  # load goes on this long after the first success again
RECOVERY_BOUND_SECONDS = 30.0
CALL_TIMEOUT_SECONDS = 15.0
PAUSE_SECONDS = 0.02  # between two calls of one client: a steady load, not a flood
PROCESSES = ["operations", "workspace", "gateway"]


@dataclass(frozen=True)
class Call:
    done: float  # monotonic time the answer came
    client: str  # "grpc" or "http"
    outcome: str  # "ok", a gRPC status with its x-error-code, or an HTTP status with its code


@dataclass
class Load:
    """What the clients sent and heard, shared between their threads."""

    calls: list[Call] = field(default_factory=list)
    attempted: set[tuple[str, str]] = field(default_factory=set)  # (owner, key)
    acknowledged: dict[tuple[str, str], str] = field(default_factory=dict)  # -> operation id
    jobs: set[str] = field(default_factory=set)  # acknowledged job ids
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    errors: list[BaseException] = field(default_factory=list)

    def record(self, client: str, outcome: str) -> None:
        with self.lock:
            self.calls.append(Call(time.monotonic(), client, outcome))

    def successes(self, client: str, after: float) -> list[Call]:
        with self.lock:
            return [
                c for c in self.calls if c.client == client and c.outcome == "ok" and c.done > after
            ]

    def failures(self, client: str) -> collections.Counter[str]:
        with self.lock:
            return collections.Counter(
                c.outcome for c in self.calls if c.client == client and c.outcome != "ok"
            )


@dataclass
class Product:
    stack: Stack
    env: dict[str, str]
    gateway: str
    logs: KeptLog


@pytest.fixture
def server() -> Iterator[ThrowawayMariadb]:
    with throwaway_mariadb() as mariadb:
        mariadb.start()
        yield mariadb


@pytest.fixture
def product(
    server: ThrowawayMariadb, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Product]:
    monkeypatch.chdir(tmp_path)  # the children's cwd: nothing lands in the checkout
    url = server.create_database("durable_ops")
    migrate.upgrade(url)
    env = {
        "OPS_DATABASE_URL": url,
        **key_env(),  # the gateway and the AI worker get their own key from it
        "OPS_JWT_SECRET": JWT_SECRET,
        "OPS_LOG_LEVEL": "warning",
        "OPS_LOG_JSON": "true",
        "OPS_GATEWAY_BIND": f"127.0.0.1:{free_port()}",
    }
    for name in GRPC_SERVICES:
        address = f"127.0.0.1:{free_port()}"
        env[service_variable(name, "bind")] = env[service_variable(name, "target")] = address
    logs = KeptLog()
    stack = Stack(env, process_specs(Settings.from_env(env), PROCESSES), out=logs)
    try:
        stack.start()
        stack.wait_healthy(timeout=90)
        yield Product(stack, env, f"http://{env['OPS_GATEWAY_BIND']}", logs)
    finally:
        stack.stop(grace=10)
        logs.save(tmp_path / "children.log")


def _create_request(key: str, index: int) -> pb.CreateOperationRequest:
    return pb.CreateOperationRequest(
        task_type=TASK_TYPE,
        idempotency_key=key,
        subject=pb.Subject(type="job", id=f"job-{index}"),
    )


def _rpc_outcome(error: grpc.RpcError) -> str:
    failure = failure_of(error)
    return f"{failure.code.name}:{failure.error_code or '-'}"


def _grpc_client(load: Load, target: str, index: int) -> None:
    owner = f"restart-user-{index}"
    md = metadata(Role.GATEWAY, owner)
    with grpc.insecure_channel(target) as channel:
        stub = pb_grpc.OperationsServiceStub(channel)
        number = 0
        while not load.stop.is_set():
            key = f"restart-{index}-{number}"
            with load.lock:
                load.attempted.add((owner, key))
            try:
                reply = stub.CreateOperation(
                    _create_request(key, number), metadata=md, timeout=CALL_TIMEOUT_SECONDS
                )
            except grpc.RpcError as error:
                load.record("grpc", _rpc_outcome(error))
            else:
                with load.lock:
                    load.acknowledged[(owner, key)] = reply.operation.id
                load.record("grpc", "ok")
            number += 1
            time.sleep(PAUSE_SECONDS)


def _http_outcome(response: httpx.Response) -> str:
    try:
        code = str(response.json().get("code", "-"))
    except ValueError:
        code = "not json"
    return f"{response.status_code}:{code}"


def _http_client(load: Load, gateway: str) -> None:
    headers = {"Authorization": f"Bearer {mint_user_token(JWT_SECRET, HTTP_OWNER, 900)}"}
    with httpx.Client(base_url=gateway, headers=headers, timeout=CALL_TIMEOUT_SECONDS) as http:
        turn = 0
        while not load.stop.is_set():
            turn += 1
            try:
                if turn % 2:
                    response = http.post("/api/jobs", json=JOB)
                    if response.status_code == 201:
                        with load.lock:
                            load.jobs.add(str(response.json()["id"]))
                else:
                    response = http.get("/api/operations", params={"page_size": 5})
            except httpx.TransportError as error:
                load.record("http", f"transport:{type(error).__name__}")
            else:
                load.record("http", "ok" if response.is_success else _http_outcome(response))
            time.sleep(PAUSE_SECONDS)


def _run(load: Load, target: Callable[..., None], *args: object) -> threading.Thread:
    def guarded() -> None:
        try:
            target(load, *args)
        except BaseException as error:
            load.errors.append(error)

    thread = threading.Thread(target=guarded)
    thread.start()
    return thread


def _wait(condition: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout:g} s waiting for {what}"
        time.sleep(0.05)


def test_a_killed_database_loses_no_acknowledged_create(
    server: ThrowawayMariadb, product: Product
) -> None:
    load = Load()
    target = product.env["OPS_OPERATIONS_TARGET"]
    threads = [_run(load, _grpc_client, target, index) for index in range(GRPC_CLIENTS)]
    threads.append(_run(load, _http_client, product.gateway))
    started = time.monotonic()
    try:
        _wait(
            lambda: len(load.acknowledged) >= BEFORE_KILL and load.jobs,
            60,
            "creates before the kill",
        )
        acknowledged_before = len(load.acknowledged)
        killed_at = time.monotonic()
        server.kill()
        time.sleep(OUTAGE_SECONDS)
        restarted_at = time.monotonic()
        server_ready = server.start()
        _wait(
            lambda: load.successes("grpc", restarted_at) and load.successes("http", restarted_at),
            RECOVERY_BOUND_SECONDS,
            "a successful call after the restart",
        )
        recovered_at = min(
            call.done
            for client in ("grpc", "http")
            for call in load.successes(client, restarted_at)[:1]
        )
        time.sleep(AFTER_RECOVERY_SECONDS)
    finally:
        load.stop.set()
        for thread in threads:
            thread.join(CALL_TIMEOUT_SECONDS + 5)
    assert not load.errors, load.errors
    first_success = {
        client: load.successes(client, restarted_at)[0].done - restarted_at
        for client in ("grpc", "http")
    }
    during = [c for c in load.calls if killed_at < c.done < recovered_at]
    # Answered while nothing could have answered (a call in flight at the kill may end later).
    impossible = [c for c in during if c.outcome == "ok" and killed_at + 2 < c.done < restarted_at]

    # Every create sent again: the acknowledged ones answer what they answered, the others
    # were made at most once (a commit whose answer was lost) or are made now.
    db = Database(product.env["OPS_DATABASE_URL"], pool_size=2)
    again: dict[tuple[str, str], pb.CreateOperationResponse] = {}
    with grpc.insecure_channel(target) as channel:
        stub = pb_grpc.OperationsServiceStub(channel)
        for owner, key in sorted(load.attempted):
            number = int(key.rsplit("-", 1)[1])
            again[(owner, key)] = stub.CreateOperation(
                _create_request(key, number),
                metadata=metadata(Role.GATEWAY, owner),
                timeout=CALL_TIMEOUT_SECONDS,
            )
    rows = read_rows(
        db,
        select(UserOperation.id, UserOperation.owner_user_id, UserOperation.idempotency_key).where(
            UserOperation.task_type == TASK_TYPE
        ),
    )
    jobs = {str(job_id) for (job_id,) in read_rows(db, select(Job.id))}
    db.dispose()
    stored = {(str(row.owner_user_id), str(row.idempotency_key)): str(row.id) for row in rows}
    lost = {k: v for k, v in load.acknowledged.items() if stored.get(k) != v}
    changed = {
        k: again[k].operation.id
        for k, v in load.acknowledged.items()
        if again[k].created or again[k].operation.id != v
    }
    unacknowledged = load.attempted - set(load.acknowledged)
    committed_unanswered = sum(1 for k in unacknowledged if not again[k].created)
    grpc_failures, http_failures = load.failures("grpc"), load.failures("http")
    report(
        f"\ndatabase restart drill: {len(load.calls)} calls from {GRPC_CLIENTS} gRPC clients and "
        f"1 HTTP client; {len(load.acknowledged)} creates acknowledged ({acknowledged_before} "
        f"before the SIGKILL) and {len(load.jobs)} jobs; the server down {OUTAGE_SECONDS:g} s, "
        f"ready {server_ready:.2f} s after its restart; first success after the restart: "
        f"gRPC {first_success['grpc']:.2f} s, HTTP {first_success['http']:.2f} s "
        f"(recovery {recovered_at - restarted_at:.2f} s); {len(during)} calls from the kill "
        f"to the recovery; failures gRPC {dict(grpc_failures)}, HTTP {dict(http_failures)}; "
        f"lost {len(lost)} creates and {len(load.jobs - jobs)} jobs; {len(unacknowledged)} "
        f"unanswered creates of which {committed_unanswered} had committed; "
        f"{time.monotonic() - started:.1f} s in all"
    )

    assert product.stack.dead() == [], "a service died with its database"
    assert impossible == [], impossible
    # The outage was seen on both sides (the sets are not empty), only ever as "unavailable".
    assert set(grpc_failures) == {"UNAVAILABLE:database_unavailable"}, grpc_failures
    assert {outcome.split(":")[0] for outcome in http_failures} == {"503"}, http_failures
    unexpected = [line for line in product.logs.lines if "unexpected_error" in line]
    assert unexpected == [], unexpected[:5]
    # Nothing acknowledged was lost; nothing acknowledged is made again.
    assert lost == {}, lost
    assert load.jobs <= jobs, sorted(load.jobs - jobs)
    assert changed == {}, changed
    assert len(stored) == len(rows) == len(load.attempted)
    assert recovered_at - restarted_at < RECOVERY_BOUND_SECONDS
