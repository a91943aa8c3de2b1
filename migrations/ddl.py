"""Mechanics shared by revisions: which dialect, and how a statement is issued.

Nothing here knows a table: every revision carries its own DDL, written out
for each dialect, so no later change to the model changes what an old revision
does (ADR 0002). Revisions already applied depend on these helpers, so change
what one does only by adding another.

MariaDB DDL is not transactional, so every statement a revision issues there
is idempotent (``IF NOT EXISTS`` / ``IF EXISTS``): a revision that died half
way is finished by running it again.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from alembic import op
from alembic.operations import BatchOperations
from sqlalchemy import TextClause, text


def is_mariadb() -> bool:
    return op.get_bind().dialect.name in ("mysql", "mariadb")


def create_table(*, sqlite: str, mariadb: str) -> None:
    """Issue the dialect's own ``CREATE TABLE``, exactly as the revision wrote it."""
    if is_mariadb():
        # A bare CREATE TABLE would make a half-applied revision fail for good.
        if not mariadb.lstrip().startswith("CREATE TABLE IF NOT EXISTS "):
            raise ValueError("MariaDB DDL must be idempotent: CREATE TABLE IF NOT EXISTS")
        op.execute(text(mariadb))
    else:
        op.execute(text(sqlite))


def create_index(
    name: str, table: str, columns: Sequence[str | TextClause], *, unique: bool = False
) -> None:
    op.create_index(name, table, list(columns), unique=unique, if_not_exists=True)


def drop_index(name: str, table: str) -> None:
    op.drop_index(name, table_name=table, if_exists=True)


def drop_table(name: str) -> None:
    op.execute(text(f"DROP TABLE IF EXISTS {name}"))


@contextmanager
def sqlite_batch_alter_table(table: str) -> Iterator[BatchOperations]:
    """``op.batch_alter_table`` on SQLite, keeping the table's indexes as they were.

    A batch that SQLite cannot do in place rebuilds the table from reflection,
    and reflection loses an index's sort order: the claim index would come
    back ``priority ASC`` and every claim would sort the queue. Each index the
    rebuild changed is put back from the DDL the database itself held, so no
    model is read. An index the batch drops stays dropped; change an index
    outside the batch, or it is put back as it was.
    """
    if is_mariadb():
        raise RuntimeError("MariaDB revisions issue their own idempotent ALTER TABLE")
    bind = op.get_bind()
    query = text(
        "SELECT name, sql FROM sqlite_master "
        "WHERE type = 'index' AND tbl_name = :table AND sql IS NOT NULL"
    )
    before = {str(name): str(sql) for name, sql in bind.execute(query, {"table": table})}
    with op.batch_alter_table(table) as batch:
        yield batch
    after = {str(name): str(sql) for name, sql in bind.execute(query, {"table": table})}
    for name, sql in before.items():
        if name in after and after[name] != sql:
            op.drop_index(name, table_name=table)
            bind.exec_driver_sql(sql)  # verbatim: not parsed for bind parameters
