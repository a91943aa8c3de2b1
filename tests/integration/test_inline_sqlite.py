"""Short SQLite transactions on the event loop's thread (ADR 0030): they run there when
they can start at once, and go to the thread pool when another connection or process
holds the write lock, while the loop keeps answering."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select, text

from durable_ops.clock import utc_now
from durable_ops.storage import operations
from durable_ops.storage.db import Database
from durable_ops.storage.inline_sqlite import CHECKPOINT_EVERY, InlineSqlite
from durable_ops.storage.schema import UserOperation
from durable_ops.storage.tx import Tx
from tests.support.stored import rows, scalar

OWNER = "inline-owner"
# Holds SQLite's write lock from another process until its stdin closes.
HOLD_THE_WRITE_LOCK = """
import sqlite3, sys
connection = sqlite3.connect(sys.argv[1], isolation_level=None)
connection.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.read()
connection.execute("COMMIT")
"""


def _inline(db: Database) -> InlineSqlite:
    assert db.inline is not None, "a SQLite file database has an inline connection"
    return db.inline


def _create(number: int) -> operations.CreateRequest:
    return operations.CreateRequest(
        task_type="strategy.snapshot",
        idempotency_key=f"inline-{number}",
        subject_type="job",
        subject_id=f"job-{number}",
    )


async def _create_short(db: Database, number: int) -> str:
    row, _ = await db.run_async(
        lambda tx: operations.create(tx, _create(number), utc_now()), owner_id=OWNER, short=True
    )
    return row.id


def _thread_of(tx: Tx) -> int:
    tx.connection.execute(text("SELECT 1"))
    return threading.get_ident()


def test_a_short_transaction_runs_on_the_loops_thread_and_others_on_the_pool(
    sqlite_db: Database,
) -> None:
    async def threads() -> tuple[int, int, int]:
        short = await sqlite_db.run_async(_thread_of, owner_id=None, short=True)
        pooled = await sqlite_db.run_async(_thread_of, owner_id=None)
        return threading.get_ident(), short, pooled

    loop_thread, short, pooled = asyncio.run(threads())
    assert short == loop_thread
    assert pooled != loop_thread
    assert _inline(sqlite_db).outcomes == {"inline": 1}


def test_a_short_write_commits_and_an_error_in_it_rolls_back(sqlite_db: Database) -> None:
    def fails(tx: Tx) -> None:
        operations.create(tx, _create(2), utc_now())
        raise ValueError("the work's own failure")

    async def scenario() -> str:
        made = await _create_short(sqlite_db, 1)
        with pytest.raises(ValueError, match="own failure"):
            await sqlite_db.run_async(fails, owner_id=OWNER, short=True)
        return made

    made = asyncio.run(scenario())
    assert rows(sqlite_db, select(UserOperation.id)) == [(made,)]


def test_a_write_lock_held_by_another_process_sends_it_to_the_pool_and_the_loop_answers(
    sqlite_db: Database, sqlite_path: Path
) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_THE_WRITE_LOCK, str(sqlite_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    assert holder.stdin is not None
    try:
        assert holder.stdout.readline() == "locked\n"

        async def scenario() -> tuple[str, int]:
            create = asyncio.create_task(_create_short(sqlite_db, 1))
            ticks = 0  # the loop answering meanwhile, as a health check would
            while ticks < 20:
                await asyncio.sleep(0.01)
                ticks += 1
            assert not create.done(), "the write waited for the other process's lock"
            holder.stdin.close()  # type: ignore[union-attr]
            return await create, ticks

        made, ticks = asyncio.run(asyncio.wait_for(scenario(), timeout=30))
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.wait()
    assert ticks == 20
    assert _inline(sqlite_db).outcomes == {"busy": 1}
    assert rows(sqlite_db, select(UserOperation.id)) == [(made,)]


def test_the_connection_taken_by_another_thread_sends_it_to_the_pool(sqlite_db: Database) -> None:
    inline = _inline(sqlite_db)
    inside = threading.Event()
    release = threading.Event()

    def hold(tx: Tx) -> None:
        tx.connection.execute(text("SELECT 1"))
        inside.set()
        release.wait(10)

    holding = threading.Thread(
        target=lambda: asyncio.run(sqlite_db.run_async(hold, owner_id=None, short=True))
    )
    holding.start()
    try:
        assert inside.wait(10)
        loop_thread, ran_on = asyncio.run(_where_it_ran(sqlite_db))
    finally:
        release.set()
        holding.join()
    assert ran_on != loop_thread
    assert inline.outcomes == {"inline": 1, "taken": 1}


async def _where_it_ran(db: Database) -> tuple[int, int]:
    ran_on = await db.run_async(_thread_of, owner_id=None, write=False, short=True)
    return threading.get_ident(), ran_on


def test_the_wal_is_checkpointed_by_the_pool_and_stays_bounded(
    sqlite_db: Database, sqlite_path: Path
) -> None:
    """The inline connection never checkpoints; every CHECKPOINT_EVERY writes one is asked
    of the pool, so the WAL is reused from its start instead of growing with every write."""
    wal = sqlite_path.with_name(sqlite_path.name + "-wal")

    async def writes(first: int, count: int) -> None:
        for number in range(first, first + count):
            await _create_short(sqlite_db, number)

    sizes = []
    for done in range(1, 6):
        asyncio.run(writes((done - 1) * CHECKPOINT_EVERY, CHECKPOINT_EVERY))
        sizes.append(wal.stat().st_size)
        _wait_for_checkpoints(sqlite_db, done)
    assert _inline(sqlite_db).outcomes == {"inline": 5 * CHECKPOINT_EVERY}
    assert sizes[-1] <= 2 * sizes[0], f"the WAL grew with every round: {sizes}"
    count = scalar(sqlite_db, select(func.count()).select_from(UserOperation))
    assert count == 5 * CHECKPOINT_EVERY


def _wait_for_checkpoints(db: Database, count: int) -> None:
    give_up_at = time.monotonic() + 10  # a hang guard only
    while db.checkpoints < count:
        assert time.monotonic() < give_up_at, f"{db.checkpoints} checkpoints, expected {count}"
        time.sleep(0.01)


def test_an_in_memory_database_has_no_inline_connection() -> None:
    memory = Database("sqlite://")
    try:
        assert memory.inline is None
    finally:
        memory.dispose()


def test_an_empty_owner_is_refused_on_the_loop_and_on_the_pool(sqlite_db: Database) -> None:
    async def both() -> None:
        for short in (True, False):
            with pytest.raises(ValueError, match="owner scope needs an owner id"):
                await sqlite_db.run_async(_thread_of, owner_id="", short=short)

    asyncio.run(both())
    assert _inline(sqlite_db).outcomes == {}
