"""The pool's round-trip policies, on real connections: no ROLLBACK after a COMMIT,
a ROLLBACK when a transaction is left open, and a fresh connection in place of
one the server dropped while it was idle."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from typing import Any

import pytest
from sqlalchemy import event, text

from durable_ops.storage import pool
from durable_ops.storage.db import Database
from tests.conftest import _admin as _admin_connection


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    database = Database(db_url, pool_size=1)
    yield database
    database.dispose()


def _rollbacks(database: Database) -> list[bool]:
    """Every reset of a returned connection, as "did the driver see an open transaction"."""
    seen: list[bool] = []

    @event.listens_for(database.engine, "reset", insert=True)  # before the pool's own
    def _record(dbapi_connection: Any, _record: Any, state: Any) -> None:
        seen.append(not state.transaction_was_reset and pool.in_transaction(dbapi_connection))

    return seen


def test_the_driver_reports_the_transaction_it_is_in(db: Database) -> None:
    raw = db.engine.raw_connection()
    try:
        cursor = raw.cursor()
        if db.is_sqlite:
            cursor.execute("BEGIN")
        cursor.execute("DELETE FROM jobs")
        assert pool.in_transaction(raw.dbapi_connection)
        raw.commit()
        assert not pool.in_transaction(raw.dbapi_connection)
    finally:
        raw.close()


def test_a_committed_transaction_returns_its_connection_without_a_rollback(db: Database) -> None:
    resets = _rollbacks(db)
    for _ in range(3):
        db.run(lambda tx: tx.execute(text("SELECT 1")).scalar(), owner_id="alice")
    assert resets
    assert not any(resets)


def test_a_connection_returned_inside_a_transaction_is_rolled_back(db: Database) -> None:
    resets = _rollbacks(db)
    raw = db.engine.raw_connection()
    cursor = raw.cursor()
    if db.is_sqlite:
        cursor.execute("BEGIN")
    cursor.execute(
        "INSERT INTO jobs (id, owner_user_id, title, company, description, created_at, updated_at)"
        " VALUES ('j1', 'alice', 't', '', 'd', '2026-11-30 00:00:00', '2026-11-30 00:00:00')"
    )
    raw.close()  # back to the pool with the INSERT uncommitted
    assert resets == [True]
    count = db.run(
        lambda tx: tx.execute(text("SELECT COUNT(*) FROM jobs")).scalar(),
        owner_id=None,
        write=False,
    )
    assert count == 0


def test_an_idle_connection_the_server_dropped_is_replaced_before_use(
    migrated_mariadb_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    database = Database(migrated_mariadb_url, pool_size=1)
    try:
        first = database.run(
            lambda tx: tx.execute(text("SELECT CONNECTION_ID()")).scalar(), owner_id=None
        )
        with closing(_admin_connection(migrated_mariadb_url)) as admin, admin.cursor() as cursor:
            cursor.execute(f"KILL {int(str(first))}")
        monkeypatch.setattr(pool, "IDLE_PING_SECONDS", 0.0)
        second = database.run(
            lambda tx: tx.execute(text("SELECT CONNECTION_ID()")).scalar(), owner_id=None
        )
        assert second != first
    finally:
        database.dispose()
