"""A SQLite database whose write lock another process holds past the busy timeout.

In an incident drill a ``sqlite3`` connection held ``BEGIN IMMEDIATE`` on the stack's
file for 70 s (as a backup tool or a shell left open does): each write waited the
pool's 30 s busy timeout and then raised SQLite's "database is locked" as an
unforeseen error, logged ``rpc_unexpected_error`` with a stack trace and answered
INTERNAL; the sweeper's ``sweep_failed`` said only ``OperationalError``. The lock is
contention, as MariaDB's lock waits are: ``Unavailable`` (``database_busy``), which
clients retry, and the next write works once the lock is let go.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import grpc
import pytest
from sqlalchemy import event

from durable_ops.clock import utc_now
from durable_ops.model.errors import Unavailable
from durable_ops.rpc.errors import status_for
from durable_ops.storage import operations
from durable_ops.storage.db import Database

OWNER = "locked-owner"


async def _create(db: Database, key: str) -> str:
    request = operations.CreateRequest(
        task_type="strategy.snapshot", idempotency_key=key, subject_type="job", subject_id="j"
    )
    row, _ = await db.run_async(
        lambda tx: operations.create(tx, request, utc_now()), owner_id=OWNER, short=True
    )
    return row.id


def _wait_briefly(dbapi_connection: Any, _record: Any) -> None:
    # The pool's connections wait 30 s for a lock; the test's wait a tenth of a second.
    dbapi_connection.execute("PRAGMA busy_timeout=100").close()


def test_a_write_lock_held_elsewhere_is_busy_not_an_internal_error(
    sqlite_db: Database, sqlite_path: Path
) -> None:
    event.listen(sqlite_db.engine, "connect", _wait_briefly)
    holder = sqlite3.connect(sqlite_path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(Unavailable) as refused:
            asyncio.run(_create(sqlite_db, "while-locked"))
        assert refused.value.code == "database_busy"
        assert status_for(refused.value) == grpc.StatusCode.UNAVAILABLE
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert asyncio.run(_create(sqlite_db, "after-the-lock"))
