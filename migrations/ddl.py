"""Helpers shared by revisions: dialect branching and idempotent index DDL.

MariaDB DDL is not transactional, so every statement a revision issues there
is idempotent (``IF NOT EXISTS`` / ``IF EXISTS``): a revision that died half
way is finished by running it again.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op
from sqlalchemy import MetaData, TextClause, text

from durable_ops.storage.schema import Base


def is_mariadb() -> bool:
    return op.get_bind().dialect.name in ("mysql", "mariadb")


def create_sqlite_table_from_model(name: str) -> None:
    """Native SQLite DDL generated from the model, without its secondary indexes."""
    copy = MetaData(naming_convention=Base.metadata.naming_convention)
    for model_table in Base.metadata.sorted_tables:  # foreign keys need their targets
        model_table.to_metadata(copy)
    table = copy.tables[name]
    table.indexes.clear()
    table.create(op.get_bind())


def create_mariadb_table(ddl: str) -> None:
    op.execute(text(ddl.replace("CREATE TABLE ", "CREATE TABLE IF NOT EXISTS ", 1)))


def create_index(
    name: str, table: str, columns: Sequence[str | TextClause], *, unique: bool = False
) -> None:
    op.create_index(name, table, list(columns), unique=unique, if_not_exists=True)


def drop_table(name: str) -> None:
    op.execute(text(f"DROP TABLE IF EXISTS {name}"))


MARIADB_TABLE_OPTIONS = "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
