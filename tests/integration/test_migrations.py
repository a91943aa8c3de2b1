"""Migrations: round trip, no drift from the models, bounded MariaDB types."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from durable_ops.storage import migrate
from durable_ops.storage.db import create_db_engine
from durable_ops.storage.schema import Base
from tests.conftest import MakeDatabase

CLAIM_INDEX = "ix_user_operations_claim"
STRICT_TABLES = (
    "user_operations",
    "user_notifications",
    "user_ai_settings",
    "ai_admission_control",
)


@pytest.fixture
def fresh_url(engine_name: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if engine_name == "sqlite":
        return f"sqlite:///{tmp_path / 'fresh.sqlite3'}"
    make: MakeDatabase = request.getfixturevalue("make_mariadb_database")
    return make()


def _tables(url: str) -> set[str]:
    engine = create_db_engine(url)
    try:
        return set(inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def test_upgrade_downgrade_upgrade(fresh_url: str) -> None:
    migrate.upgrade(fresh_url)
    assert _tables(fresh_url) == set(Base.metadata.tables)
    migrate.migrate_to(fresh_url, "0001_operations")
    assert _tables(fresh_url) == {"user_operations"}
    migrate.migrate_to(fresh_url, "base")
    assert _tables(fresh_url) == set()
    migrate.upgrade(fresh_url)
    assert _tables(fresh_url) == set(Base.metadata.tables)


def _ignore_desc_index(obj: object, name: str | None, type_: str, *_: object) -> bool:
    # Alembic cannot reflect a DESC key part; the claim index is checked directly below.
    return not (type_ == "index" and name == CLAIM_INDEX)


def test_no_drift_between_models_and_migrated_database(db_url: str) -> None:
    engine = create_db_engine(db_url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(
                connection,
                opts={"compare_type": True, "include_object": _ignore_desc_index},
            )
            assert compare_metadata(context, Base.metadata) == []
    finally:
        engine.dispose()


def test_claim_index_orders_priority_descending(db_url: str, engine_name: str) -> None:
    engine = create_db_engine(db_url)
    try:
        with engine.connect() as connection:
            if engine_name == "sqlite":
                rows = connection.execute(text(f"PRAGMA index_xinfo({CLAIM_INDEX})")).all()
                keyed = [(row.name, row.desc) for row in rows if row.key]
                assert keyed == [("state", 0), ("priority", 1), ("created_at", 0)]
            else:
                rows = connection.execute(
                    text(
                        "SELECT column_name, collation FROM information_schema.statistics "
                        "WHERE table_schema = DATABASE() AND index_name = :name "
                        "ORDER BY seq_in_index"
                    ),
                    {"name": CLAIM_INDEX},
                ).all()
                assert [tuple(row) for row in rows] == [
                    ("state", "A"),
                    ("priority", "D"),
                    ("created_at", "A"),
                ]
    finally:
        engine.dispose()


def test_mariadb_columns_are_bounded(migrated_mariadb_url: str) -> None:
    engine = create_db_engine(migrated_mariadb_url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                text(
                    "SELECT table_name, column_name, column_type "
                    "FROM information_schema.columns WHERE table_schema = DATABASE()"
                )
            ).all()
    finally:
        engine.dispose()
    strict = [row for row in rows if row.table_name in STRICT_TABLES]
    assert strict, "no columns found"
    allowed = ("varchar(", "char(", "datetime(6)", "int(", "tinyint(1)")
    loose = [tuple(row) for row in strict if not row.column_type.startswith(allowed)]
    assert loose == []
    widths = {(row.table_name, row.column_name): row.column_type for row in rows}
    assert widths[("user_operations", "task_type")] == "varchar(64)"
    assert widths[("user_operations", "idempotency_key")] == "varchar(128)"
    assert widths[("user_operations", "failure_message")] == "varchar(512)"
    assert widths[("user_operations", "created_at")] == "datetime(6)"
    assert widths[("user_notifications", "operation_id")] == "char(32)"


def test_services_refuse_an_unmigrated_database(tmp_path: Path) -> None:
    engine = create_db_engine(f"sqlite:///{tmp_path / 'empty.sqlite3'}")
    try:
        with pytest.raises(migrate.SchemaNotCurrent, match="opsctl migrate"):
            migrate.require_current(engine)
    finally:
        engine.dispose()


def test_a_database_behind_is_refused_and_a_newer_one_is_accepted(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ops.sqlite3'}"
    migrate.upgrade(url, "0002_notifications")
    engine = create_db_engine(url)
    try:
        with pytest.raises(migrate.SchemaNotCurrent, match="0002_notifications"):
            migrate.require_current(engine)
        migrate.upgrade(url)
        migrate.require_current(engine)
        with engine.begin() as connection:  # what a newer release's additive revision leaves
            connection.execute(text("UPDATE alembic_version SET version_num = '0099_future'"))
        migrate.require_current(engine)
    finally:
        engine.dispose()
