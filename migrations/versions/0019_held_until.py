"""Scheduled operations held out of the claim's line until their time (ADR 0050).

- ``user_operations`` gains ``held_until`` (DATETIME NULL): a queued operation scheduled
  for later carries its ``not_before`` here until the sweeper clears it at that moment;
  NULL for every operation in the claim's line. Existing queued operations scheduled at
  their create get their ``not_before``; those already due are let in by the first sweep.
- The claim index becomes ``(state, held_until, priority DESC, fair_tag, not_before)``:
  the claim (``held_until IS NULL``) walks only the operations in line, however many are
  scheduled for later, and the sweeper seeks the held ones now due on its first two
  columns.

Galera-safe: an online ``ADD COLUMN``, a backfill and an index rebuild, each idempotent,
replicated in total order (TOI).

Frozen: the DDL below is this revision's, written out per dialect.

Revision ID: 0019_held_until
Revises: 0018_fair_shares
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy import text

from durable_ops.migrations import ddl

revision = "0019_held_until"
down_revision = "0018_fair_shares"
branch_labels = None
depends_on = None

CLAIM_INDEX = "ix_user_operations_claim"
BACKFILL = (
    "UPDATE user_operations SET held_until = not_before"
    " WHERE state = 'queued' AND not_before > created_at AND held_until IS NULL"
)


def upgrade() -> None:
    ddl.drop_index(CLAIM_INDEX, "user_operations")
    if ddl.is_mariadb():
        op.execute(
            "ALTER TABLE user_operations ADD COLUMN IF NOT EXISTS held_until DATETIME(6) NULL"
        )
    else:
        op.add_column("user_operations", sa.Column("held_until", sa.DateTime(), nullable=True))
    op.execute(BACKFILL)
    ddl.create_index(
        CLAIM_INDEX,
        "user_operations",
        ["state", "held_until", text("priority DESC"), "fair_tag", "not_before"],
    )


def downgrade() -> None:
    ddl.drop_index(CLAIM_INDEX, "user_operations")
    if ddl.is_mariadb():
        op.execute("ALTER TABLE user_operations DROP COLUMN IF EXISTS held_until")
    else:
        with ddl.sqlite_batch_alter_table("user_operations") as batch:
            batch.drop_column("held_until")
    ddl.create_index(
        CLAIM_INDEX, "user_operations", ["state", text("priority DESC"), "fair_tag", "not_before"]
    )
