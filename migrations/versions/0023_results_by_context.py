"""A deleted CV takes the results made with it, found without reading every result (ADR 60).

``ix_ai_workspace_notes_owner_context (owner_user_id, context_ref)``: deleting a CV
deletes every result that used it as the second reference (a job's strategy snapshot
made with it quotes it). The results' other index is by subject, where ``context_ref``
is not: the delete would read every result the owner has.

Galera-safe: one index, idempotent, replicated in total order (TOI).

Frozen: the DDL below is this revision's, written out per dialect.

Revision ID: 0023_results_by_context
Revises: 0022_owner_state_held
"""

from __future__ import annotations

from durable_ops.migrations import ddl

revision = "0023_results_by_context"
down_revision = "0022_owner_state_held"
branch_labels = None
depends_on = None

INDEX = "ix_ai_workspace_notes_owner_context"


def upgrade() -> None:
    ddl.create_index(INDEX, "ai_workspace_notes", ["owner_user_id", "context_ref"])


def downgrade() -> None:
    ddl.drop_index(INDEX, "ai_workspace_notes")
