"""A SQLite database whose disk fills up, or whose writes fail, and then recovers.

One failed COMMIT used to leave the inline connection (``inline_sqlite``) marked
as in a transaction, so every later short transaction failed at ``begin()``
until a restart. Now the failure is ``Unavailable`` (``database_unavailable``,
UNAVAILABLE to clients) with one log line saying the disk is full; the next
call works as soon as space is back; and the failed write is not there.

Real SQLite, real failures: ``PRAGMA max_page_count`` caps the file (SQLITE_FULL
at a statement), ``RLIMIT_FSIZE`` makes the WAL append at COMMIT fail (an I/O
error), and, as root, a small tmpfs filled to the last byte (SQLITE_FULL at COMMIT).
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import signal
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest
from sqlalchemy import Engine, event, select
from sqlalchemy.exc import IntegrityError
from structlog.testing import capture_logs

from durable_ops.clock import utc_now
from durable_ops.model.errors import Unavailable
from durable_ops.storage import migrate, operations
from durable_ops.storage.db import Database
from durable_ops.storage.schema import UserOperation
from durable_ops.storage.tx import Tx
from tests.support import disks
from tests.support.clock import ManualClock
from tests.support.grpc_services import running_services
from tests.support.operations_client import OpsClient

OWNER = "disk-owner"


def _request(key: str) -> operations.CreateRequest:
    return operations.CreateRequest(
        task_type="strategy.snapshot",
        idempotency_key=key,
        subject_type="job",
        subject_id=f"job-{key}",
    )


async def _create(db: Database, key: str, *, short: bool = True) -> str:
    row, _ = await db.run_async(
        lambda tx: operations.create(tx, _request(key), utc_now()), owner_id=OWNER, short=short
    )
    return row.id


async def _read(db: Database, operation_id: str) -> str:
    row = await db.run_async(
        lambda tx: operations.get(tx, operation_id), owner_id=OWNER, write=False, short=True
    )
    return row.id


def _stored_keys(path: Path) -> list[str]:
    """The idempotency keys stored, read by a database opened afresh."""
    fresh = Database(f"sqlite:///{path}")
    try:
        return sorted(
            fresh.run(
                lambda tx: list(tx.execute(select(UserOperation.idempotency_key)).scalars()),
                owner_id=None,
                write=False,
            )
        )
    finally:
        fresh.dispose()


def _refused_as_unavailable(db: Database, key: str, *, short: bool = True) -> Unavailable:
    with pytest.raises(Unavailable) as refused:
        asyncio.run(_create(db, key, short=short))
    assert refused.value.code == "database_unavailable"
    return refused.value


def _storage_lines(logs: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [line for line in logs if line["event"] in ("database_disk_full", "database_io_error")]


# --- SQLITE_FULL at a statement: the file capped with PRAGMA max_page_count -------------


@contextlib.contextmanager
def _capped(db: Database) -> Iterator[None]:
    """Every transaction of ``db`` (inline and pooled) may not grow the file past its
    size now; the cap is lifted on leaving."""
    cap: list[int | None] = [None]

    def cap_it(connection: Any) -> None:
        if cap[0] is not None:
            connection.exec_driver_sql(f"PRAGMA max_page_count={cap[0]}")
        else:
            connection.exec_driver_sql("PRAGMA max_page_count=4294967294")

    def pages(tx: Tx) -> int:
        return int(tx.connection.exec_driver_sql("PRAGMA page_count").scalar_one())

    cap[0] = db.run(pages, owner_id=None, write=False)
    engines: tuple[Engine, ...] = db.engines
    for engine in engines:
        event.listen(engine, "begin", cap_it)
    try:
        yield
    finally:
        cap[0] = None  # transactions from now on lift the cap their connection had


def test_a_full_file_is_unavailable_inline_and_on_the_pool_and_writes_resume_after(
    sqlite_db: Database, sqlite_path: Path
) -> None:
    first = asyncio.run(_create(sqlite_db, "before"))
    with capture_logs() as logs, _capped(sqlite_db):
        refused: Unavailable | None = None
        for number in range(200):  # until the capped file has no page left
            failed = f"full-{number}"
            try:
                asyncio.run(_create(sqlite_db, failed))
            except Unavailable as full:
                refused = full
                break
        assert refused is not None, "the capped file never filled up"
        assert refused.code == "database_unavailable"
        assert "disk is full" in refused.message
        # Still full: every call is refused the same way, inline and on the pool.
        _refused_as_unavailable(sqlite_db, "full-again")
        _refused_as_unavailable(sqlite_db, "full-pooled", short=False)
        assert asyncio.run(_read(sqlite_db, first)) == first  # reads still work
    assert len(_storage_lines(logs)) == 1, logs
    assert _storage_lines(logs)[0]["event"] == "database_disk_full"
    # Space is back: the very next calls work, inline and on the pool.
    asyncio.run(_create(sqlite_db, "after"))
    asyncio.run(_create(sqlite_db, "after-pooled", short=False))
    assert sqlite_db.inline is not None
    assert sqlite_db.inline.outcomes["inline"] >= 2
    stored = _stored_keys(sqlite_path)
    assert not set(stored) & {failed, "full-again", "full-pooled"}
    assert {"before", "after", "after-pooled"} <= set(stored)


# --- an I/O error at COMMIT: the WAL may not grow (RLIMIT_FSIZE) -------------------------


@contextlib.contextmanager
def _files_may_not_grow_past(size: int) -> Iterator[None]:
    """Writes of this process past ``size`` bytes of any file fail (EFBIG) meanwhile."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    before = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, before)


def test_an_io_error_at_commit_is_unavailable_and_the_next_call_works(
    sqlite_db: Database, sqlite_path: Path
) -> None:
    """The tester's defect: a COMMIT that fails left the inline connection unusable
    (InvalidRequestError at ``begin()`` on every later call, until a restart)."""
    first = asyncio.run(_create(sqlite_db, "before"))
    wal = sqlite_path.with_name(sqlite_path.name + "-wal")
    with capture_logs() as logs:
        with _files_may_not_grow_past(wal.stat().st_size):
            refused = _refused_as_unavailable(sqlite_db, "at-commit")
            assert "disk" in refused.message
            _refused_as_unavailable(sqlite_db, "at-commit-again")
        assert asyncio.run(_read(sqlite_db, first)) == first
        made = asyncio.run(_create(sqlite_db, "after"))
    assert asyncio.run(_read(sqlite_db, made)) == made
    assert [line["event"] for line in _storage_lines(logs)] == ["database_io_error"]
    assert _stored_keys(sqlite_path) == ["after", "before"]


# --- SQLITE_FULL at COMMIT: a real full disk (root only) --------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 MB tmpfs, unmounted after; the test is skipped where it cannot be mounted."""
    with disks.small_disk(tmp_path / "small-disk") as mount_point:
        yield mount_point


def test_a_full_disk_at_commit_is_unavailable_and_creates_resume_once_space_is_back(
    small_disk: Path,
) -> None:
    """The tester's steps: creates going, the disk filled, then the filler deleted."""
    path = small_disk / "ops.sqlite3"
    migrate.upgrade(f"sqlite:///{path}")
    db = Database(f"sqlite:///{path}")
    filler = small_disk / "filler"
    try:
        first = asyncio.run(_create(db, "before"))
        created, refused = ["before"], []
        with capture_logs() as logs:
            disks.fill(filler)
            # A write may still fit where the WAL already took space: each call either
            # creates (and says so) or is refused as unavailable, never anything else.
            for number in range(10):
                key = f"full-{number}"
                try:
                    asyncio.run(_create(db, key))
                except Unavailable as full:
                    refused.append((key, full))
                else:
                    created.append(key)
            filler.unlink()
            made = asyncio.run(_create(db, "after"))
            created.append("after")
        assert refused, "the full disk refused no create"
        assert all(full.code == "database_unavailable" for _, full in refused)
        assert all("disk is full" in full.message for _, full in refused)
        assert asyncio.run(_read(db, made)) == made
        assert asyncio.run(_read(db, first)) == first
        assert [line["event"] for line in _storage_lines(logs)] == ["database_disk_full"]
    finally:
        db.dispose()
    assert _stored_keys(path) == sorted(created)


def test_a_commit_refused_leaves_the_inline_connection_usable(sqlite_db: Database) -> None:
    """Whatever refuses a COMMIT (here a deferred foreign key), the next short
    transaction begins on a connection in no transaction."""

    def dangling(tx: Tx) -> None:
        tx.connection.exec_driver_sql("PRAGMA defer_foreign_keys=ON")
        tx.connection.exec_driver_sql(
            "INSERT INTO ai_answer_drafts (operation_id, attempt, lease_token_hash, body,"
            " updated_at, owner_user_id) VALUES (?, 1, 'x', '', '2026-01-01 00:00:00', ?)",
            (str(uuid.uuid4()), OWNER),
        )

    async def scenario() -> str:
        with pytest.raises(IntegrityError, match="FOREIGN KEY"):
            await sqlite_db.run_async(dangling, owner_id=None, short=True)
        return await _create(sqlite_db, "after")

    made = asyncio.run(scenario())
    assert asyncio.run(_read(sqlite_db, made)) == made


def test_a_client_gets_unavailable_on_a_full_disk_and_its_creates_resume_after(
    small_disk: Path,
) -> None:
    """Over gRPC, as the tester saw it: UNAVAILABLE with ``database_unavailable``, not
    INTERNAL, while the disk is full, and every call served again once space is back."""
    url = f"sqlite:///{small_disk / 'ops.sqlite3'}"
    migrate.upgrade(url)
    filler = small_disk / "filler"
    with running_services(url, ManualClock()) as services:
        ops = OpsClient(services)
        first = ops.create(OWNER, "before")
        created, refused = ["before"], []
        disks.fill(filler)
        for number in range(10):
            key = f"full-{number}"
            try:
                ops.create(OWNER, key)
            except grpc.RpcError as refusal:
                refused.append(refusal)
            else:
                created.append(key)
        assert ops.get(OWNER, first.id).id == first.id
        filler.unlink()
        made = ops.create(OWNER, "after")
        created.append("after")
        assert ops.get(OWNER, made.id).id == made.id
    assert refused, "the full disk refused no create"
    for answer in refused:
        assert answer.code() == grpc.StatusCode.UNAVAILABLE
        trailers = {item.key: str(item.value) for item in answer.trailing_metadata() or ()}
        assert trailers["x-error-code"] == "database_unavailable"
        assert "disk is full" in (answer.details() or "")
    assert _stored_keys(small_disk / "ops.sqlite3") == sorted(created)
