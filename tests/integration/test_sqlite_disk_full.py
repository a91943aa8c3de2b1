"""A SQLite database whose disk fills up, or whose writes fail, and then recovers.

One failed COMMIT used to leave the inline connection (``inline_sqlite``) marked
as in a transaction, so every later short transaction failed at ``begin()``
until a restart. Now the next call works.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.exc import IntegrityError

from durable_ops.clock import utc_now
from durable_ops.storage import migrate, operations
from durable_ops.storage.db import Database
from durable_ops.storage.tx import Tx

OWNER = "disk-owner"


@pytest.fixture
def sqlite_path(tmp_path: Path) -> Path:
    path = tmp_path / "ops.sqlite3"
    migrate.upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture
def db(sqlite_path: Path) -> Iterator[Database]:
    database = Database(f"sqlite:///{sqlite_path}")
    yield database
    database.dispose()


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


def test_a_commit_refused_leaves_the_inline_connection_usable(db: Database) -> None:
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
            await db.run_async(dangling, owner_id=None, short=True)
        return await _create(db, "after")

    made = asyncio.run(scenario())
    assert asyncio.run(_read(db, made)) == made
