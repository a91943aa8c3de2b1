"""An owner's open work is found without reading the owner's history (ADR 53).

- ``ix_user_operations_owner_state (owner_user_id, state, task_type)``: admission counts
  the owner's active AI operations under the global admission lock; through the
  owner's other indexes it read every operation the owner ever made.
- ``ix_user_notifications_owner_unread (owner_user_id, read_at, dismissed_at)``: the
  unread count (the bell, on every page and every ending) and "mark all read" read
  every notification the owner ever had. Covering: MariaDB estimates ``read_at IS
  NULL`` as matching every row of the owner and would rather scan the table than look
  up each.

Galera-safe: two indexes, each idempotent, replicated in total order (TOI).

Frozen: the DDL below is this revision's, written out per dialect.

Revision ID: 0021_owner_open_work
Revises: 0020_claim_by_type
"""

from __future__ import annotations

from durable_ops.migrations import ddl

revision = "0021_owner_open_work"
down_revision = "0020_claim_by_type"
branch_labels = None
depends_on = None

OPERATIONS_INDEX = "ix_user_operations_owner_state"
NOTIFICATIONS_INDEX = "ix_user_notifications_owner_unread"


def upgrade() -> None:
    ddl.create_index(OPERATIONS_INDEX, "user_operations", ["owner_user_id", "state", "task_type"])
    ddl.create_index(
        NOTIFICATIONS_INDEX, "user_notifications", ["owner_user_id", "read_at", "dismissed_at"]
    )


def downgrade() -> None:
    ddl.drop_index(NOTIFICATIONS_INDEX, "user_notifications")
    ddl.drop_index(OPERATIONS_INDEX, "user_operations")
