"""An owner's unfinished operations are found without reading their history.

- ``ix_user_operations_owner_state (owner_user_id, state, task_type)``: admission counts
  the owner's active AI operations under the global admission lock; through the
  owner's other indexes it read every operation the owner ever made.

Galera-safe: one index, idempotent, replicated in total order (TOI).

Frozen: the DDL below is this revision's, written out per dialect.

Revision ID: 0021_owner_state
Revises: 0020_claim_by_type
"""

from __future__ import annotations

from durable_ops.migrations import ddl

revision = "0021_owner_state"
down_revision = "0020_claim_by_type"
branch_labels = None
depends_on = None

TABLE = "user_operations"
INDEX = "ix_user_operations_owner_state"


def upgrade() -> None:
    ddl.create_index(INDEX, TABLE, ["owner_user_id", "state", "task_type"])


def downgrade() -> None:
    ddl.drop_index(INDEX, TABLE)
