"""Crash drill on the embedded default: SIGKILL the Operations process on SQLite under load.

Its short transactions run on the event loop's own connection (ADR 0030), so
a kill lands in the middle of creates, claims and batched completions made
there. Two clients create operations and one worker claims and completes
them in batches, without pause, until the kill; the process is started again
on the same file. Afterwards:

- the file passes SQLite's ``integrity_check``;
- every acknowledged create is there under its key, and sent again answers
  the same operation; an unacknowledged one sent again is made at most once;
- every acknowledged completion is ``succeeded`` with one notification;
- the restarted process claims and completes what was left.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from sqlalchemy import func, select

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.api.operations.v1 import operations_pb2_grpc as pb_grpc
from durable_ops.model.scope import Role
from durable_ops.settings import Settings
from durable_ops.stack.children import Stack, process_specs
from durable_ops.storage import migrate
from durable_ops.storage.db import Database
from durable_ops.storage.schema import UserNotification, UserOperation
from tests.support import stored
from tests.support.drills import KeptLog
from tests.support.figures import report
from tests.support.grpc_services import metadata
from tests.support.keys import key_env
from tests.support.ports import free_port

pytestmark = pytest.mark.slow

TASK_TYPE = "drill.sqlite"
CREATORS = 2
BEFORE_KILL = 200  # acknowledged completions before the kill
BATCH = 10
CALL_TIMEOUT_SECONDS = 10.0
HANG_GUARD = 120.0


@dataclass
class Load:
    attempted: set[tuple[str, str]] = field(default_factory=set)  # (owner, key)
    created: dict[tuple[str, str], str] = field(default_factory=dict)  # acknowledged -> id
    completed: set[str] = field(default_factory=set)  # acknowledged completions
    refusals: int = 0  # calls that failed (the kill, and the restart's first moments)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    errors: list[BaseException] = field(default_factory=list)

    def refused(self) -> None:
        """A call failed (the server is down or starting): counted, and a pause."""
        with self.lock:
            self.refusals += 1
        time.sleep(0.05)


@dataclass
class Product:
    stack: Stack
    target: str
    url: str


@pytest.fixture
def product(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Product]:
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path / 'ops.sqlite3'}"
    migrate.upgrade(url)
    target = f"127.0.0.1:{free_port()}"
    env = {
        "OPS_DATABASE_URL": url,
        **key_env(),
        "OPS_LOG_LEVEL": "warning",
        "OPS_OPERATIONS_BIND": target,
        "OPS_OPERATIONS_TARGET": target,
    }
    logs = KeptLog()
    stack = Stack(env, process_specs(Settings.from_env(env), ["operations"]), out=logs)
    try:
        stack.start()
        stack.wait_healthy(timeout=60)
        yield Product(stack, target, url)
    finally:
        stack.stop(grace=10)
        logs.save(tmp_path / "children.log")


def _create_request(key: str) -> pb.CreateOperationRequest:
    return pb.CreateOperationRequest(
        task_type=TASK_TYPE,
        idempotency_key=key,
        subject=pb.Subject(type="job", id=key),
        retry_delay_seconds=1,
    )


def _creator(load: Load, stub: pb_grpc.OperationsServiceStub, index: int) -> None:
    owner = f"sqlite-drill-{index}"
    md = metadata(Role.GATEWAY, owner)
    number = 0
    while not load.stop.is_set():
        key = f"k-{index}-{number}"
        with load.lock:
            load.attempted.add((owner, key))
        try:
            reply = stub.CreateOperation(
                _create_request(key), metadata=md, timeout=CALL_TIMEOUT_SECONDS
            )
        except grpc.RpcError:
            load.refused()
            continue
        with load.lock:
            load.created[(owner, key)] = reply.operation.id
        number += 1


def _drain_once(stub: pb_grpc.OperationsServiceStub, wait_seconds: int) -> set[str]:
    """One claim of up to a batch and its completion; the ids completed."""
    claimed = stub.ClaimOperations(
        pb.ClaimOperationsRequest(
            task_types=[TASK_TYPE],
            lease_seconds=5,
            max_operations=BATCH,
            wait=Duration(seconds=wait_seconds),
        ),
        metadata=metadata(Role.WORKER),
        timeout=CALL_TIMEOUT_SECONDS + wait_seconds,
    ).claimed
    if not claimed:
        return set()
    reply = stub.SettleOperations(
        pb.SettleOperationsRequest(
            items=[
                pb.SettleOperationsRequest.Item(
                    owner_id=lease.owner_id,
                    complete=pb.CompleteOperationRequest(
                        operation_id=lease.operation.id, lease_token=lease.lease_token
                    ),
                )
                for lease in claimed
            ]
        ),
        metadata=metadata(Role.WORKER),
        timeout=CALL_TIMEOUT_SECONDS,
    )
    return {outcome.operation_id for outcome in reply.outcomes if outcome.status_code == 0}


def _worker(load: Load, stub: pb_grpc.OperationsServiceStub) -> None:
    while not load.stop.is_set():
        try:
            done = _drain_once(stub, wait_seconds=1)
        except grpc.RpcError:
            load.refused()
            continue
        with load.lock:
            load.completed |= done


def _run(load: Load, target: object, *args: object) -> threading.Thread:
    def guarded() -> None:
        try:
            target(*args)  # type: ignore[operator]
        except BaseException as error:  # reported by the test, not lost in a thread
            load.errors.append(error)
            load.stop.set()

    thread = threading.Thread(target=guarded, daemon=True)
    thread.start()
    return thread


def _wait(condition: object, what: str) -> None:
    give_up_at = time.monotonic() + HANG_GUARD
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < give_up_at, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_a_killed_operations_process_on_sqlite_loses_no_acknowledged_write(
    product: Product,
) -> None:
    load = Load()
    with grpc.insecure_channel(product.target) as channel:
        stub = pb_grpc.OperationsServiceStub(channel)
        threads = [_run(load, _creator, load, stub, index) for index in range(CREATORS)]
        threads.append(_run(load, _worker, load, stub))
        _wait(lambda: len(load.completed) >= BEFORE_KILL or load.errors, "completions")
        product.stack.kill("operations")  # SIGKILL, mid-transaction as likely as not
        load.stop.set()
        for thread in threads:
            thread.join(HANG_GUARD)
        assert not load.errors, load.errors
        product.stack.restart("operations")
        product.stack.wait_healthy(timeout=60)

        db = Database(product.url, pool_size=2)
        try:
            with db.engine.connect() as connection:
                assert connection.exec_driver_sql("PRAGMA integrity_check").scalar() == "ok"
            again = _send_every_create_again(stub, load)
            rows = _rows(db)
            for (owner, key), operation_id in load.created.items():
                assert rows.get(operation_id) == (owner, key), f"acknowledged {key} lost"
                assert again[(owner, key)] == operation_id
            assert len(rows) == len(load.attempted), "a create sent twice was made twice"
            settled = _settled(db)
            for operation_id in load.completed:
                assert settled.get(operation_id) == ("succeeded", 1), operation_id
            drained = _finish_the_rest(stub, db)
            report(
                f"sqlite crash drill: {len(load.created)} creates and {len(load.completed)}"
                f" completions acknowledged before the SIGKILL, {len(load.attempted)} sent;"
                f" {load.refusals} calls refused around the kill; integrity ok;"
                f" {drained} finished by the restarted process"
            )
        finally:
            db.dispose()


def _send_every_create_again(
    stub: pb_grpc.OperationsServiceStub, load: Load
) -> dict[tuple[str, str], str]:
    answers = {}
    for owner, key in sorted(load.attempted):
        reply = stub.CreateOperation(
            _create_request(key),
            metadata=metadata(Role.GATEWAY, owner),
            timeout=CALL_TIMEOUT_SECONDS,
        )
        answers[(owner, key)] = reply.operation.id
    return answers


def _rows(db: Database) -> dict[str, tuple[str, str]]:
    return {
        row.id: (row.owner_user_id, row.idempotency_key)
        for row in stored.rows(db, select(UserOperation))
    }


def _settled(db: Database) -> dict[str, tuple[str, int]]:
    """Each operation's state and how many notifications it has."""
    notes = (
        select(UserNotification.operation_id, func.count().label("notes"))
        .group_by(UserNotification.operation_id)
        .subquery()
    )
    query = select(UserOperation.id, UserOperation.state, func.coalesce(notes.c.notes, 0)).join(
        notes, notes.c.operation_id == UserOperation.id, isouter=True
    )
    return {row[0]: (row[1], row[2]) for row in stored.rows(db, query)}


def _finish_the_rest(stub: pb_grpc.OperationsServiceStub, db: Database) -> int:
    """Claim and complete until every operation succeeded; how many that took. The
    leases the killed process handed out run out (5 s) and its sweeper requeues them."""
    give_up_at = time.monotonic() + HANG_GUARD
    drained = 0
    while any(state != "succeeded" for state, _ in _settled(db).values()):
        assert time.monotonic() < give_up_at, "the restarted process left work undone"
        drained += len(_drain_once(stub, wait_seconds=1))
    for state, notes in _settled(db).values():
        assert (state, notes) == ("succeeded", 1)
    return drained
