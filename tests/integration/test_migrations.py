"""Migrations: frozen revisions, no drift from the models, a new revision round-trips.

The revisions carry their own DDL per dialect (ADR 0002), so the drift check
compares two independent things on both engines: a database the revisions
built, and ``Base.metadata``.
"""

from __future__ import annotations

import ast
import shutil
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.operations import Operations
from alembic.runtime.migration import MigrationContext
from sqlalchemy import CheckConstraint, Connection, Engine, String, insert, inspect, select, text
from sqlalchemy.dialects import mysql
from sqlalchemy.types import TypeDecorator

from durable_ops.storage import migrate, schema_stamp
from durable_ops.storage.db import create_db_engine
from durable_ops.storage.schema import Base, OperationAttempt, UserNotification, UserOperation
from tests.conftest import MakeDatabase

QUEUE_KEYS = [("priority", True), ("fair_tag", False), ("not_before", False)]
# The indexes with a DESC key part, and their keys (name, descending), read from the engine.
DESC_INDEXES = {
    "ix_user_operations_claim": [
        ("state", False),
        ("held_until", False),
        ("task_type", False),
        *QUEUE_KEYS,
    ],
    "ix_user_operations_queue": [("state", False), ("held_until", False), *QUEUE_KEYS],
}
STRICT_TABLES = (
    "user_operations",
    "user_notifications",
    "user_ai_settings",
    "ai_admission_control",
    "token_budget_days",
    "owner_token_budgets",
    "paused_task_types",
    "concurrency_slots",
    "owner_shares",
)
NOW = datetime(2026, 12, 1, 12, 0, 0, 123456, tzinfo=UTC)
OPERATION_ID = "a" * 32
NOTIFICATION_ID = "b" * 32
ATTEMPT_ID = "c" * 32

# A later release's additive revision, as its author would write it.
THROWAWAY_REVISION = '''"""Throwaway: one nullable column on user_operations.

Revision ID: 9999_throwaway
Revises: {head}
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from durable_ops.migrations import ddl

revision = "9999_throwaway"
down_revision = "{head}"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if ddl.is_mariadb():
        op.execute(
            "ALTER TABLE user_operations ADD COLUMN IF NOT EXISTS throwaway_note VARCHAR(64) NULL"
        )
    else:
        with ddl.sqlite_batch_alter_table("user_operations") as batch:
            batch.add_column(sa.Column("throwaway_note", sa.String(64), nullable=True))


def downgrade() -> None:
    if ddl.is_mariadb():
        op.execute("ALTER TABLE user_operations DROP COLUMN IF EXISTS throwaway_note")
    else:
        with ddl.sqlite_batch_alter_table("user_operations") as batch:
            batch.drop_column("throwaway_note")
'''


def after_head(revision: str) -> str:
    """A later release's revision, revising this release's head (whatever it is)."""
    return revision.replace("{head}", migrate.head_revision())


@pytest.fixture
def connect() -> Iterator[Callable[[str], Connection]]:
    """Connections that are closed, and their engines disposed, after the test."""
    engines: list[Engine] = []

    def open_connection(url: str) -> Connection:
        engine = create_db_engine(url)
        engines.append(engine)
        return engine.connect()

    yield open_connection
    for engine in engines:
        engine.dispose()


def _tables(url: str) -> set[str]:
    engine = create_db_engine(url)
    try:
        return set(inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def _columns(connection: Connection, table: str) -> list[str]:
    return [column["name"] for column in inspect(connection).get_columns(table)]


def _ignore_desc_index(obj: object, name: str | None, type_: str, *_: object) -> bool:
    # Alembic cannot reflect a DESC key part; these indexes are checked directly below.
    return not (type_ == "index" and name in DESC_INDEXES)


def _check_names(connection: Connection) -> set[tuple[str, str]]:
    """What the database lacks of the model's named CHECKs: Alembic never compares them."""
    inspector = inspect(connection)
    tables = set(inspector.get_table_names())
    missing = set()
    for table in Base.metadata.sorted_tables:
        if table.name not in tables:
            continue  # compare_metadata reports the whole table
        present = {check["name"] for check in inspector.get_check_constraints(table.name)}
        for constraint in table.constraints:
            if isinstance(constraint, CheckConstraint) and constraint.name not in present:
                missing.add((table.name, str(constraint.name)))
    return missing


def _decorated_types(connection: Connection) -> set[tuple[str, str]]:
    """Columns whose engine type differs from what the model's TypeDecorator asks for.

    Alembic compares a TypeDecorator by its generic impl, so it cannot tell
    ``DATETIME`` from the ``DATETIME(6)`` UtcDateTime needs on MariaDB, nor
    ``TEXT`` from LongText's ``MEDIUMTEXT``: compare the rendered types.
    """
    inspector = inspect(connection)
    tables = set(inspector.get_table_names())
    wrong = set()
    for table in Base.metadata.sorted_tables:
        if table.name not in tables:
            continue
        reflected = {column["name"]: column["type"] for column in inspector.get_columns(table.name)}
        for column in table.columns:
            if not isinstance(column.type, TypeDecorator) or column.name not in reflected:
                continue
            want = column.type.compile(dialect=connection.dialect)
            if reflected[column.name].compile(dialect=connection.dialect) != want:
                wrong.add((table.name, column.name))
    return wrong


def _drift(connection: Connection) -> set[tuple[str, str, str]]:
    """Every difference between the database and the model, as (kind, table, name)."""
    context = MigrationContext.configure(
        connection, opts={"compare_type": True, "include_object": _ignore_desc_index}
    )
    found: set[tuple[str, str, str]] = set()
    diffs: list[Any] = compare_metadata(context, Base.metadata)
    for diff in diffs:
        for change in diff if isinstance(diff, list) else [diff]:
            kind = change[0]
            if kind in ("add_column", "remove_column"):
                found.add((kind, change[2], change[3].name))
            elif kind.startswith("modify_"):
                found.add((kind, change[2], change[3]))
            elif kind in ("add_table", "remove_table"):
                found.add((kind, change[1].name, change[1].name))
            else:  # indexes, unique constraints, foreign keys
                found.add((kind, change[1].table.name, str(change[1].name)))
    found |= {("add_check", table, name) for table, name in _check_names(connection)}
    found |= {("modify_type", table, name) for table, name in _decorated_types(connection)}
    return found


def _index_keys(connection: Connection, index: str) -> list[tuple[str, bool]]:
    """An index's key parts and whether each is descending, read from the engine."""
    if connection.dialect.name == "sqlite":
        rows = connection.execute(text(f"PRAGMA index_xinfo({index})")).all()
        return [(row.name, row.desc == 1) for row in rows if row.key]
    rows = connection.execute(
        text(
            "SELECT column_name, collation FROM information_schema.statistics "
            "WHERE table_schema = DATABASE() AND index_name = :name ORDER BY seq_in_index"
        ),
        {"name": index},
    ).all()
    return [(row.column_name, row.collation == "D") for row in rows]


def test_upgrade_downgrade_upgrade(fresh_url: str) -> None:
    migrate.upgrade(fresh_url)
    assert _tables(fresh_url) == set(Base.metadata.tables)
    migrate.migrate_to(fresh_url, "0001_operations")
    assert _tables(fresh_url) == {"user_operations"}
    migrate.migrate_to(fresh_url, "base")
    assert _tables(fresh_url) == set()
    migrate.upgrade(fresh_url)
    assert _tables(fresh_url) == set(Base.metadata.tables)


def test_no_drift_between_models_and_migrated_database(
    db_url: str, connect: Callable[[str], Connection]
) -> None:
    assert _drift(connect(db_url)) == set()


@pytest.mark.mariadb
def test_a_copy_of_the_migrated_template_is_a_migrated_database(
    copy_of_migrated_mariadb: MakeDatabase,
    make_mariadb_database: MakeDatabase,
    connect: Callable[[str], Connection],
) -> None:
    """What tests that need a database of their own get (``copy_of_migrated_mariadb``):
    the model's schema, the migrations' revision and the rows they wrote."""
    copied, migrated = copy_of_migrated_mariadb(), make_mariadb_database()
    migrate.upgrade(migrated)
    assert migrate.stamped_revision(copied) == migrate.head_revision()

    def rows(connection: Connection) -> dict[str, list[Any]]:
        """Each table's rows, a time written as such: the two were migrated apart."""
        return {
            table.name: sorted(
                (tuple("a time" if isinstance(v, datetime) else v for v in row) for row in found),
                key=repr,
            )
            for table in Base.metadata.sorted_tables
            for found in [connection.execute(table.select()).all()]
        }

    # Closed at the end: an open transaction's locks would keep the databases from their drop.
    with connect(copied) as copy, connect(migrated) as original:
        assert _drift(copy) == set()
        copied_rows = rows(copy)
        assert copied_rows == rows(original)
        assert any(copied_rows.values())  # the migrations' own rows are there to compare


@pytest.mark.parametrize("index", sorted(DESC_INDEXES))
def test_queue_indexes_order_priority_descending(
    db_url: str, connect: Callable[[str], Connection], index: str
) -> None:
    assert _index_keys(connect(db_url), index) == DESC_INDEXES[index]


Drift = Callable[[Operations], None]


def _drop_result_ref(ops: Operations) -> None:
    with ops.batch_alter_table("user_operations") as batch:
        batch.drop_column("result_ref")


def _narrow_failure_message(ops: Operations) -> None:
    with ops.batch_alter_table("user_operations") as batch:
        batch.alter_column(
            "failure_message", type_=String(255), existing_type=String(512), existing_nullable=True
        )


def _make_context_ref_required(ops: Operations) -> None:
    with ops.batch_alter_table("user_operations") as batch:
        batch.alter_column("context_ref", nullable=False, existing_type=String(64))


def _drop_deadline_index(ops: Operations) -> None:
    ops.drop_index("ix_user_operations_state_deadline", table_name="user_operations")


def _drop_progress_check(ops: Operations) -> None:
    with ops.batch_alter_table("user_operations") as batch:
        batch.drop_constraint("ck_user_operations_progress", type_="check")


def _drop_notifications(ops: Operations) -> None:
    ops.drop_table("user_notifications")


def _lose_microseconds(ops: Operations) -> None:
    ops.alter_column(
        "user_operations", "created_at", type_=mysql.DATETIME(), existing_nullable=False
    )


def _shrink_description(ops: Operations) -> None:
    ops.alter_column("jobs", "description", type_=mysql.TEXT(), existing_nullable=False)


DRIFTS: dict[str, tuple[Drift, tuple[str, str, str]]] = {
    "missing column": (_drop_result_ref, ("add_column", "user_operations", "result_ref")),
    "narrower column": (
        _narrow_failure_message,
        ("modify_type", "user_operations", "failure_message"),
    ),
    "nullability": (
        _make_context_ref_required,
        ("modify_nullable", "user_operations", "context_ref"),
    ),
    "missing index": (
        _drop_deadline_index,
        ("add_index", "user_operations", "ix_user_operations_state_deadline"),
    ),
    "missing check": (
        _drop_progress_check,
        ("add_check", "user_operations", "ck_user_operations_progress"),
    ),
    "missing table": (
        _drop_notifications,
        ("add_table", "user_notifications", "user_notifications"),
    ),
    "DATETIME without microseconds": (
        _lose_microseconds,
        ("modify_type", "user_operations", "created_at"),
    ),
    "TEXT instead of MEDIUMTEXT": (
        _shrink_description,
        ("modify_type", "jobs", "description"),
    ),
}
MARIADB_ONLY = {"DATETIME without microseconds", "TEXT instead of MEDIUMTEXT"}


@pytest.mark.parametrize("drift", list(DRIFTS))
def test_the_drift_check_catches_a_drifted_database(
    drift: str, fresh_url: str, engine_name: str, connect: Callable[[str], Connection]
) -> None:
    if drift in MARIADB_ONLY and engine_name == "sqlite":
        pytest.skip("SQLite has one DATETIME and one TEXT: these types exist only on MariaDB")
    change, expected = DRIFTS[drift]
    migrate.upgrade(fresh_url)
    connection = connect(fresh_url)
    with connection.begin():
        change(Operations(MigrationContext.configure(connection)))
    assert expected in _drift(connection)


def test_revisions_do_not_read_the_model() -> None:
    """Frozen: no revision, nor the helpers they share, imports the schema or the model."""
    sources = [
        migrate.MIGRATIONS / "ddl.py",
        *sorted((migrate.MIGRATIONS / "versions").glob("*.py")),
    ]
    assert len(sources) > 3
    reads: list[str] = []
    for source in sources:
        for node in ast.walk(ast.parse(source.read_text(), str(source))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            reads += [
                f"{source.name}: {name}"
                for name in names
                if name.split(".")[0] == "durable_ops"
                and not name.startswith("durable_ops.migrations.")
            ]
    assert reads == []


def _add_operation_and_notification(connection: Connection) -> None:
    with connection.begin():
        connection.execute(
            insert(UserOperation).values(
                id=OPERATION_ID,
                owner_user_id="alice",
                task_type="summarise",
                idempotency_key="k",
                request_hash="h" * 64,
                subject_type="job",
                subject_id="j",
                state="queued",
                priority=5,
                attempt=0,
                max_attempts=3,
                retry_delay_seconds=1,
                privacy="standard",
                progress_percent=0,
                cancel_requested=False,
                created_at=NOW,
                not_before=NOW,
                fair_tag=0,
                updated_at=NOW,
            )
        )
        connection.execute(
            insert(OperationAttempt).values(
                id=ATTEMPT_ID,
                owner_user_id="alice",
                operation_id=OPERATION_ID,
                attempt=1,
                route="local",
                started_at=NOW,
                lease_expires_at=NOW,
            )
        )
        connection.execute(
            insert(UserNotification).values(
                id=NOTIFICATION_ID,
                owner_user_id="alice",
                operation_id=OPERATION_ID,
                task_type="summarise",
                outcome="succeeded",
                title="t",
                body="b",
                created_at=NOW,
            )
        )


def _notification_operation(connection: Connection) -> str | None:
    """The notification's operation; the attempt's must be the same (a rebuild cascades nothing)."""
    with connection.begin():
        attempt_of = connection.execute(
            select(OperationAttempt.operation_id).where(OperationAttempt.id == ATTEMPT_ID)
        ).scalar_one()
        notification_of = connection.execute(
            select(UserNotification.operation_id).where(UserNotification.id == NOTIFICATION_ID)
        ).scalar_one()
    assert attempt_of == OPERATION_ID
    return notification_of


def test_a_new_add_column_revision_round_trips(
    fresh_url: str, tmp_path: Path, connect: Callable[[str], Connection]
) -> None:
    """A copy of the migrations plus a later revision: upgrade, downgrade, upgrade.

    On SQLite the downgrade rebuilds ``user_operations``; the rows, the
    notification's reference to its operation and the queue indexes' DESC keys
    must all survive that.
    """
    scripts = tmp_path / "migrations"
    shutil.copytree(migrate.MIGRATIONS, scripts, ignore=shutil.ignore_patterns("__pycache__"))
    (scripts / "versions" / "9999_throwaway.py").write_text(after_head(THROWAWAY_REVISION))
    connection = connect(fresh_url)

    def state() -> tuple[str | None, bool]:
        with connection.begin():
            revision = migrate.current_revision(connection.engine)
            present = "throwaway_note" in _columns(connection, "user_operations")
        return revision, present

    migrate.upgrade(fresh_url, script_location=scripts)
    assert state() == ("9999_throwaway", True)
    migrate.require_current(connection.engine)  # this release accepts the newer schema
    _add_operation_and_notification(connection)

    migrate.downgrade(fresh_url, migrate.head_revision(), script_location=scripts)
    assert state() == (migrate.head_revision(), False)
    assert _notification_operation(connection) == OPERATION_ID
    with connection.begin():
        assert {name: _index_keys(connection, name) for name in DESC_INDEXES} == DESC_INDEXES
        assert _drift(connection) == set()

    migrate.upgrade(fresh_url, script_location=scripts)
    assert state() == ("9999_throwaway", True)
    assert _notification_operation(connection) == OPERATION_ID
    with connection.begin():
        assert {name: _index_keys(connection, name) for name in DESC_INDEXES} == DESC_INDEXES
        assert _drift(connection) == {("remove_column", "user_operations", "throwaway_note")}


BREAKING_REVISION = '''"""Broken: a notification of an operation that does not exist.

Revision ID: 9999_broken
Revises: {head}
"""

from alembic import op

revision = "9999_broken"
down_revision = "{head}"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "INSERT INTO user_notifications (id, owner_user_id, operation_id, task_type, outcome, "
        "title, body, created_at) VALUES ('n', 'alice', 'missing', 't', 'o', 't', 'b', "
        "CURRENT_TIMESTAMP)"
    )


def downgrade() -> None:
    pass
'''


def test_a_sqlite_revision_that_breaks_a_reference_is_rolled_back(
    tmp_path: Path, connect: Callable[[str], Connection]
) -> None:
    """Foreign keys are off while SQLite revisions run, so they are checked before commit."""
    url = f"sqlite:///{tmp_path / 'ops.sqlite3'}"
    scripts = tmp_path / "migrations"
    shutil.copytree(migrate.MIGRATIONS, scripts, ignore=shutil.ignore_patterns("__pycache__"))
    (scripts / "versions" / "9999_broken.py").write_text(after_head(BREAKING_REVISION))
    migrate.upgrade(url)
    with pytest.raises(RuntimeError, match="broken foreign keys"):
        migrate.upgrade(url, script_location=scripts)
    connection = connect(url)
    with connection.begin():
        assert migrate.current_revision(connection.engine) == migrate.head_revision()
        count = connection.execute(text("SELECT COUNT(*) FROM user_notifications")).scalar()
        assert count == 0


def test_mariadb_revisions_finish_when_run_again(
    make_mariadb_database: MakeDatabase, connect: Callable[[str], Connection]
) -> None:
    """MariaDB DDL is not transactional: a revision cut short is completed by a rerun."""
    url = make_mariadb_database()
    migrate.upgrade(url)
    connection = connect(url)
    with connection.begin():  # as if every revision had died just before it was recorded
        connection.execute(text("DELETE FROM alembic_version"))
    migrate.upgrade(url)
    with connection.begin():
        assert migrate.current_revision(connection.engine) == migrate.head_revision()
        assert _drift(connection) == set()
        assert connection.execute(text("SELECT COUNT(*) FROM ai_admission_control")).scalar() == 1


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
    allowed = ("varchar(", "char(", "datetime(6)", "int(", "bigint(", "tinyint(1)")
    loose = [
        tuple(row)
        for row in strict
        if not row.column_type.startswith(allowed) and row.column_type != "date"
    ]
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


def test_a_newer_releases_schema_is_left_as_it_is_and_not_moved_blindly(tmp_path: Path) -> None:
    """The older release's application rollback runs its own ``opsctl migrate`` (and
    ``opsctl up`` migrates): on a revision it did not know, Alembic's "Can't locate
    revision" ended it in a traceback, and under Compose nothing started."""
    url = f"sqlite:///{tmp_path / 'ops.sqlite3'}"
    migrate.upgrade(url)
    engine = create_db_engine(url)
    try:
        with engine.begin() as connection:  # what a newer release's additive revision leaves
            connection.execute(text("UPDATE alembic_version SET version_num = '0099_future'"))
    finally:
        engine.dispose()
    migrate.upgrade(url)  # past head already: nothing to do
    migrate.migrate_to(url, "head")
    assert migrate.stamped_revision(url) == "0099_future"
    for target in (migrate.head_revision(), "base"):
        with pytest.raises(migrate.SchemaNotCurrent, match="0099_future, which a newer release"):
            migrate.migrate_to(url, target)
    assert migrate.stamped_revision(url) == "0099_future"


def test_the_quick_head_read_without_alembic_is_alembics_head() -> None:
    # A service's start and `opsctl up` trust it to skip loading Alembic on a current schema.
    assert schema_stamp.quick_head() == migrate.head_revision()


def test_a_sqlite_file_is_at_head_only_once_migrated(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'stamp.sqlite3'}"
    assert schema_stamp.sqlite_file_at_head(url) is False  # no file yet
    migrate.migrate_to(url, "0007_operation_tombstones")
    assert schema_stamp.sqlite_file_at_head(url) is False  # behind
    migrate.upgrade(url)
    assert schema_stamp.sqlite_file_at_head(url) is True
    assert schema_stamp.sqlite_file_at_head("mysql+pymysql://root@127.0.0.1/x") is None
