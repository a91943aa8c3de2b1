"""An owner's active AI operations are counted without reading a row (ADR 56).

Admission counts only the operations in line (``held_until IS NULL``): one scheduled
for later takes no capacity until its time. ``ix_user_operations_owner_state`` gains
``held_until``, so the count stays a seek of the index alone; without it MariaDB read
every row the owner's history holds in another index (411 rows for 11 in the read-cost
test).

Galera-safe: one index dropped and made again, each idempotent, replicated in total
order (TOI).

Frozen: the DDL below is this revision's, written out per dialect.

Revision ID: 0022_owner_state_held
Revises: 0021_owner_open_work
"""

from __future__ import annotations

from durable_ops.migrations import ddl

revision = "0022_owner_state_held"
down_revision = "0021_owner_open_work"
branch_labels = None
depends_on = None

INDEX = "ix_user_operations_owner_state"


def upgrade() -> None:
    ddl.drop_index(INDEX, "user_operations")
    ddl.create_index(
        INDEX, "user_operations", ["owner_user_id", "state", "task_type", "held_until"]
    )


def downgrade() -> None:
    ddl.drop_index(INDEX, "user_operations")
    ddl.create_index(INDEX, "user_operations", ["owner_user_id", "state", "task_type"])
