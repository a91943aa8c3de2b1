"""Per-key and global concurrency limits (issue 37, point 3; ADR 0048).

- ``concurrency_slots``: one counter row per slot (a limited task type's, ``type|``,
  and each owner's key of it, ``type|owner/key``): how many operations hold it, and
  the limit the last claim applied.
- ``user_operations`` gains ``concurrency_key`` (the create's key; NULL: its subject
  id) and ``slot_key`` (the key slot a running operation holds; NULL: none).

Galera-safe: one new InnoDB table with a primary key and one online ``ADD COLUMN``
of two nullable columns (instant on MariaDB ≥ 10.3), each idempotent, replicated in
total order (TOI).

Frozen: the DDL below is this revision's, written out per dialect.

Revision ID: 0017_concurrency_slots
Revises: 0016_paused_task_types
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from durable_ops.migrations import ddl

revision = "0017_concurrency_slots"
down_revision = "0016_paused_task_types"
branch_labels = None
depends_on = None

SQLITE = """
CREATE TABLE concurrency_slots (
    id VARCHAR(194) NOT NULL,
    running INTEGER NOT NULL,
    capacity INTEGER,
    CONSTRAINT pk_concurrency_slots PRIMARY KEY (id)
)
"""

MARIADB = """
CREATE TABLE IF NOT EXISTS concurrency_slots (
    id VARCHAR(194) NOT NULL,
    running INT NOT NULL,
    capacity INT NULL,
    CONSTRAINT pk_concurrency_slots PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
"""


def upgrade() -> None:
    ddl.create_table(sqlite=SQLITE, mariadb=MARIADB)
    if ddl.is_mariadb():
        op.execute(
            "ALTER TABLE user_operations"
            " ADD COLUMN IF NOT EXISTS concurrency_key VARCHAR(64) NULL,"
            " ADD COLUMN IF NOT EXISTS slot_key VARCHAR(194) NULL"
        )
        return
    with ddl.sqlite_batch_alter_table("user_operations") as batch:
        batch.add_column(sa.Column("concurrency_key", sa.String(64), nullable=True))
        batch.add_column(sa.Column("slot_key", sa.String(194), nullable=True))


def downgrade() -> None:
    if ddl.is_mariadb():
        op.execute(
            "ALTER TABLE user_operations"
            " DROP COLUMN IF EXISTS concurrency_key, DROP COLUMN IF EXISTS slot_key"
        )
    else:
        with ddl.sqlite_batch_alter_table("user_operations") as batch:
            batch.drop_column("slot_key")
            batch.drop_column("concurrency_key")
    ddl.drop_table("concurrency_slots")
