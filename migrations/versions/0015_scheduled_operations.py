"""Scheduled operations (issue 37, point 2; ADR 0046).

- ``user_operations`` gains ``not_before`` (DATETIME NOT NULL): the moment from which
  the operation may be claimed. A create that names none gets its own creation time,
  so every existing row is backfilled with ``created_at``.
- The claim index becomes ``(state, priority DESC, not_before)``: within a priority
  the claim takes the operation due longest ago, and a scheduled operation joins its
  priority's line at its ``not_before``, not at its creation. For a row created
  without ``not_before`` the order is the old ``created_at`` order.

Galera-safe: one online ``ADD COLUMN``, a backfill ``UPDATE`` and a ``MODIFY`` and an
index rebuild, each idempotent, replicated in total order (TOI).

Frozen: the DDL below is this revision's, written out per dialect.

Revision ID: 0015_scheduled_operations
Revises: 0013_token_budgets
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy import text

from durable_ops.migrations import ddl

revision = "0015_scheduled_operations"
down_revision = "0014_operator_console_sessions"
branch_labels = None
depends_on = None

CLAIM_INDEX = "ix_user_operations_claim"


def upgrade() -> None:
    ddl.drop_index(CLAIM_INDEX, "user_operations")
    if ddl.is_mariadb():
        op.execute(
            "ALTER TABLE user_operations ADD COLUMN IF NOT EXISTS not_before DATETIME(6) NULL"
        )
        op.execute("UPDATE user_operations SET not_before = created_at WHERE not_before IS NULL")
        op.execute("ALTER TABLE user_operations MODIFY not_before DATETIME(6) NOT NULL")
    else:
        with ddl.sqlite_batch_alter_table("user_operations") as batch:
            batch.add_column(sa.Column("not_before", sa.DateTime(), nullable=True))
        op.execute("UPDATE user_operations SET not_before = created_at WHERE not_before IS NULL")
        with ddl.sqlite_batch_alter_table("user_operations") as batch:
            batch.alter_column("not_before", existing_type=sa.DateTime(), nullable=False)
    ddl.create_index(CLAIM_INDEX, "user_operations", ["state", text("priority DESC"), "not_before"])


def downgrade() -> None:
    ddl.drop_index(CLAIM_INDEX, "user_operations")
    if ddl.is_mariadb():
        op.execute("ALTER TABLE user_operations DROP COLUMN IF EXISTS not_before")
    else:
        with ddl.sqlite_batch_alter_table("user_operations") as batch:
            batch.drop_column("not_before")
    ddl.create_index(CLAIM_INDEX, "user_operations", ["state", text("priority DESC"), "created_at"])
