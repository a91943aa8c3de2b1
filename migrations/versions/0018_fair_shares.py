"""Fair shares across owners within a priority (issue 37, point 1; ADR 0049).

- ``user_operations`` gains ``fair_tag`` (BIGINT NOT NULL): the operation's turn within
  its priority. Existing rows get their due time in µs (``not_before``), which keeps
  their order.
- The claim index becomes ``(state, priority DESC, fair_tag, not_before)``, and
  ``ix_user_operations_owner_turn (owner_user_id, priority, fair_tag)`` serves a
  create's read of its owner's last turn.
- ``owner_shares``: an operator's weight for one owner, with who set it.
- ``user_operations.base_priority`` (INT NULL): the priority it was created with, once
  aging raised it.

Galera-safe: an online ``ADD COLUMN``, a backfill, a ``MODIFY``, index changes and one
new InnoDB table with a primary key, each idempotent, replicated in total order (TOI).

Frozen: the DDL below is this revision's, written out per dialect.

Revision ID: 0018_fair_shares
Revises: 0017_concurrency_slots
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy import text

from durable_ops.migrations import ddl

revision = "0018_fair_shares"
down_revision = "0017_concurrency_slots"
branch_labels = None
depends_on = None

CLAIM_INDEX = "ix_user_operations_claim"
TURN_INDEX = "ix_user_operations_owner_turn"

SHARES_SQLITE = """
CREATE TABLE owner_shares (
    weight INTEGER NOT NULL,
    set_by VARCHAR(64) NOT NULL,
    updated_at DATETIME NOT NULL,
    owner_user_id VARCHAR(64) NOT NULL,
    CONSTRAINT pk_owner_shares PRIMARY KEY (owner_user_id)
)
"""

SHARES_MARIADB = """
CREATE TABLE IF NOT EXISTS owner_shares (
    owner_user_id VARCHAR(64) NOT NULL,
    weight INT NOT NULL,
    set_by VARCHAR(64) NOT NULL,
    updated_at DATETIME(6) NOT NULL,
    CONSTRAINT pk_owner_shares PRIMARY KEY (owner_user_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
"""


def upgrade() -> None:
    ddl.drop_index(CLAIM_INDEX, "user_operations")
    if ddl.is_mariadb():
        op.execute(
            "ALTER TABLE user_operations ADD COLUMN IF NOT EXISTS fair_tag BIGINT NULL,"
            " ADD COLUMN IF NOT EXISTS base_priority INT NULL"
        )
        op.execute(
            "UPDATE user_operations SET fair_tag ="
            " TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', not_before)"
            " WHERE fair_tag IS NULL"
        )
        op.execute("ALTER TABLE user_operations MODIFY fair_tag BIGINT NOT NULL")
    else:
        with ddl.sqlite_batch_alter_table("user_operations") as batch:
            batch.add_column(sa.Column("fair_tag", sa.BigInteger(), nullable=True))
            batch.add_column(sa.Column("base_priority", sa.Integer(), nullable=True))
        op.execute(
            "UPDATE user_operations SET fair_tag ="
            " CAST(ROUND((julianday(not_before) - 2440587.5) * 86400000000) AS INTEGER)"
            " WHERE fair_tag IS NULL"
        )
        with ddl.sqlite_batch_alter_table("user_operations") as batch:
            batch.alter_column("fair_tag", existing_type=sa.BigInteger(), nullable=False)
    ddl.create_index(
        CLAIM_INDEX, "user_operations", ["state", text("priority DESC"), "fair_tag", "not_before"]
    )
    ddl.create_index(TURN_INDEX, "user_operations", ["owner_user_id", "priority", "fair_tag"])
    ddl.create_table(sqlite=SHARES_SQLITE, mariadb=SHARES_MARIADB)


def downgrade() -> None:
    ddl.drop_table("owner_shares")
    ddl.drop_index(TURN_INDEX, "user_operations")
    ddl.drop_index(CLAIM_INDEX, "user_operations")
    if ddl.is_mariadb():
        op.execute(
            "ALTER TABLE user_operations DROP COLUMN IF EXISTS fair_tag,"
            " DROP COLUMN IF EXISTS base_priority"
        )
    else:
        with ddl.sqlite_batch_alter_table("user_operations") as batch:
            batch.drop_column("base_priority")
            batch.drop_column("fair_tag")
    ddl.create_index(CLAIM_INDEX, "user_operations", ["state", text("priority DESC"), "not_before"])
