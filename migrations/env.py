"""Alembic environment: URL from the caller, the model only for comparisons.

``target_metadata`` is the model because Alembic reads it only to compare
(autogenerate drafts, ``alembic check``); upgrade and downgrade never do, so
it cannot change what a revision does. Revisions are frozen, literal DDL
(ADR 0002).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from alembic import context
from alembic.runtime.migration import MigrationContext, MigrationInfo
from sqlalchemy import Connection

from durable_ops.storage.db import create_db_engine
from durable_ops.storage.schema import Base

config = context.config


def _foreign_keys(connection: Connection, on: bool | None = None) -> bool:
    """Read, or set then read, SQLite's foreign key enforcement on the driver connection.

    The driver connection is used because SQLite ignores the pragma inside a
    transaction, and SQLAlchemy would begin one around any statement.
    """
    cursor = connection.connection.cursor()
    try:
        if on is not None:
            cursor.execute(f"PRAGMA foreign_keys={'ON' if on else 'OFF'}")
        cursor.execute("PRAGMA foreign_keys")
        row = cursor.fetchone()
    finally:
        cursor.close()
    return row is not None and row[0] == 1


@contextmanager
def _sqlite_foreign_keys_deferred(connection: Connection) -> Iterator[None]:
    """Foreign keys off while revisions run, checked before each one commits.

    ``batch_alter_table`` rebuilds a table (copy, drop, rename); with foreign
    keys on, dropping the old ``user_operations`` would set every
    notification's ``operation_id`` to NULL.
    """
    if connection.in_transaction():
        raise RuntimeError("SQLite migrations need a connection outside any transaction")
    was_on = _foreign_keys(connection)
    if _foreign_keys(connection, on=False):
        raise RuntimeError("could not turn SQLite foreign keys off for the migration")
    try:
        yield
    finally:
        if connection.in_transaction():
            # Each revision commits itself: what is left open is the run's own reads.
            connection.rollback()
        _foreign_keys(connection, on=was_on)


def _check_foreign_keys(
    ctx: MigrationContext, step: MigrationInfo, heads: Collection[Any], run_args: Mapping[str, Any]
) -> None:
    # Runs inside the revision's transaction, so a broken reference rolls it back.
    assert ctx.connection is not None
    broken = ctx.connection.exec_driver_sql("PRAGMA foreign_key_check").all()
    if broken:
        raise RuntimeError(f"revision left broken foreign keys: {broken[:5]}")


def _run(connection: Connection) -> None:
    sqlite = connection.dialect.name == "sqlite"
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=sqlite,
        compare_type=True,
        on_version_apply=_check_foreign_keys if sqlite else None,
    )
    if not sqlite:
        with context.begin_transaction():
            context.run_migrations()
        return
    with _sqlite_foreign_keys_deferred(connection), context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = create_db_engine(config.get_main_option("sqlalchemy.url") or "")
    try:
        with engine.connect() as connection:
            _run(connection)
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline migrations are not supported; run `opsctl migrate`")
run_migrations_online()
