"""The statements the server issues for one lifecycle, captured with engine events.

An in-process Operations server runs on a background event loop over a
``Database`` whose engine carries ``before_cursor_execute``, ``commit``,
``rollback`` and pool ``checkout`` listeners. One real lifecycle (create,
claim, heartbeat, complete) goes through it over gRPC, one phase at a time,
and every statement, COMMIT and connection checkout is recorded against the
phase. The recording is both figure 2 (statements per operation) and the
script the raw-SQL baseline of figure 1 replays.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import bindparam, event, text

from benchmarks.client import Claimed, OpsClient
from benchmarks.processes import trusted
from durable_ops.api.operations.v1 import operations_pb2_grpc as pb_grpc
from durable_ops.operations.app import OperationsApp
from durable_ops.operations.service import SERVICE_NAME, OperationsService
from durable_ops.rpc.open_calls import OpenCalls
from durable_ops.rpc.server import build_server, start, stop
from durable_ops.storage.db import Database
from durable_ops.storage.operations import hash_token
from tests.support.grpc_services import BackgroundLoop

PHASES = ("create", "claim", "heartbeat", "complete")


@dataclass(frozen=True)
class Step:
    kind: str  # "sql", "commit" or "rollback"
    statement: str = ""
    parameters: Any = None
    many: bool = False  # executemany: ``parameters`` holds one set per row


@dataclass
class Recording:
    """Steps per phase, plus the values that identify the captured lifecycle."""

    steps: dict[str, list[Step]] = field(default_factory=lambda: {p: [] for p in PHASES})
    checkouts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PHASES, 0))
    known: dict[str, Any] = field(default_factory=dict)

    def statements(self, phase: str) -> list[str]:
        return [s.statement for s in self.steps[phase] if s.kind == "sql"]

    def counts(self, phase: str) -> dict[str, int]:
        """Data statements, savepoint statements, BEGINs sent, COMMITs, checkouts."""
        sql = self.statements(phase)
        savepoints = [s for s in sql if s.split()[0].upper() in ("SAVEPOINT", "RELEASE")]
        begins = [s for s in sql if s.split()[0].upper() == "BEGIN"]
        return {
            "statements": len(sql) - len(savepoints) - len(begins),
            "savepoints": len(savepoints),
            "begin": len(begins),
            "commit": sum(1 for s in self.steps[phase] if s.kind == "commit"),
            "rollback": sum(1 for s in self.steps[phase] if s.kind == "rollback"),
            "checkouts": self.checkouts[phase],
        }


class _Recorder:
    def __init__(self, db: Database) -> None:
        self.recording = Recording()
        self.phase: str | None = None
        db.listen("before_cursor_execute", self._execute)
        db.listen("commit", self._commit)
        db.listen("rollback", self._rollback)
        for engine in db.engines:
            event.listen(engine.pool, "checkout", self._checkout)

    def _add(self, step: Step) -> None:
        if self.phase is not None:
            self.recording.steps[self.phase].append(step)

    def _execute(
        self, _conn: Any, _cursor: Any, statement: str, parameters: Any, _ctx: Any, many: bool
    ) -> None:
        self._add(Step("sql", statement, parameters, many))

    def _commit(self, _conn: Any) -> None:
        self._add(Step("commit"))

    def _rollback(self, _conn: Any) -> None:
        self._add(Step("rollback"))

    def _checkout(self, *_args: Any) -> None:
        if self.phase is not None:
            self.recording.checkouts[self.phase] += 1


@contextmanager
def in_process_operations(db: Database) -> Iterator[str]:
    """The Operations servicer on 127.0.0.1:0 in this process; yields its target."""
    loop = BackgroundLoop()
    app = OperationsApp(db, lambda: datetime.now(UTC))

    async def boot() -> tuple[Any, int]:
        server, port = build_server(
            "127.0.0.1:0",
            lambda s: pb_grpc.add_OperationsServiceServicer_to_server(
                OperationsService(app, OpenCalls()), s
            ),
            [SERVICE_NAME],
            trusted=trusted(),
        )
        await start(server)
        return server, port

    server, port = loop.call(boot())
    try:
        yield f"127.0.0.1:{port}"
    finally:
        loop.call(stop(server, 0.5))
        loop.call(app.close())  # its shared polls end with it, not with the loop
        loop.close()


def capture_lifecycle(database_url: str, task_type: str = "bench.capture") -> Recording:
    """Run one real lifecycle through gRPC and record what reached the database."""
    db = Database(database_url, pool_size=4)
    recorder = _Recorder(db)
    owner, key, subject = "bench-capture-owner", "bench-capture-key", "bench-capture-subject"
    try:
        with in_process_operations(db) as target:

            async def lifecycle() -> None:
                client = OpsClient(target)
                try:
                    recorder.phase = "create"
                    operation = await client.create(owner, key, task_type, subject)
                    recorder.phase = "claim"
                    claimed = await client.claim(task_type)
                    assert claimed is not None
                    assert claimed.operation_id == operation.id
                    recorder.phase = "heartbeat"
                    await client.heartbeat_once(claimed)
                    recorder.phase = None
                    (read,) = _updated_at(db, [claimed.operation_id])
                    recorder.phase = "complete"
                    await client.complete(claimed)
                    recorder.phase = None
                    _remember(recorder.recording, owner, key, subject, claimed)
                    recorder.recording.known["updated_at"] = read
                finally:
                    recorder.phase = None
                    await client.close()

            asyncio.run(lifecycle())
    finally:
        db.dispose()
    return recorder.recording


def capture_batch(database_url: str, size: int, task_type: str = "bench.capture") -> Recording:
    """``size`` operations claimed with one ``ClaimOperations`` and completed with one
    ``SettleOperations``; the creates are not recorded. ``known`` lists the
    claimed operations' ids, owners and token hashes in claim order (the
    batched replay of figure 1 maps them to the rows it claims)."""
    db = Database(database_url, pool_size=4)
    recorder = _Recorder(db)
    try:
        with in_process_operations(db) as target:

            async def batch() -> None:
                client = OpsClient(target)
                try:
                    for n in range(size):  # one owner each: the replay maps them by value
                        await client.create(f"bench-batch-owner-{n}", f"k-{n}", task_type)
                    recorder.phase = "claim"
                    claims = await client.claim_many(size, task_type)
                    assert len(claims) == size
                    recorder.phase = None
                    read = _updated_at(db, [claimed.operation_id for claimed in claims])
                    recorder.phase = "complete"
                    assert await client.complete_many(claims) == 0
                    recorder.phase = None
                    recorder.recording.known = {
                        "operation_ids": [claimed.operation_id for claimed in claims],
                        "owners": [claimed.owner_id for claimed in claims],
                        "token_hashes": [hash_token(claimed.lease_token) for claimed in claims],
                        "updated_ats": read,
                    }
                finally:
                    recorder.phase = None
                    await client.close()

            asyncio.run(batch())
    finally:
        db.dispose()
    return recorder.recording


# Untyped columns: the values come as the driver gives them (SQLite's text), as captured.
_UPDATED_AT = text("SELECT id, updated_at FROM user_operations WHERE id IN :ids").bindparams(
    bindparam("ids", expanding=True)
)


def _updated_at(db: Database, operation_ids: list[str]) -> list[Any]:
    """Each operation's ``updated_at`` as the driver gives it: a completion reads it and
    guards its UPDATE on it, so the replay maps this captured value to its own row's."""
    with db.engine.connect() as connection:
        found: dict[str, Any] = dict(
            connection.execute(_UPDATED_AT, {"ids": operation_ids}).tuples().all()
        )
    return [found[operation_id] for operation_id in operation_ids]


def _remember(recording: Recording, owner: str, key: str, subject: str, claimed: Claimed) -> None:
    recording.known = {
        "owner": owner,
        "key": key,
        "subject": subject,
        "operation_id": claimed.operation_id,
        "token_hash": hash_token(claimed.lease_token),
    }
