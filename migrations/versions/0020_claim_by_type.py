"""The claim walks one task type at a time (ADR 0051).

- ``ix_user_operations_claim`` becomes ``(state, held_until, task_type, priority DESC,
  fair_tag, not_before)``: a claim seeks each type it names, so a backlog of a type it
  does not name (paused, served elsewhere, or by no worker) is not read.
- ``ix_user_operations_queue (state, held_until, priority DESC, fair_tag, not_before)``
  keeps the order across types that a create's turn (ADR 0049) and aging read.

Galera-safe: index changes, each idempotent, replicated in total order (TOI).

Frozen: the DDL below is this revision's, written out per dialect.

Revision ID: 0020_claim_by_type
Revises: 0019_held_until
"""

from __future__ import annotations

from sqlalchemy import TextClause, text

from durable_ops.migrations import ddl

revision = "0020_claim_by_type"
down_revision = "0019_held_until"
branch_labels = None
depends_on = None

TABLE = "user_operations"
CLAIM_INDEX = "ix_user_operations_claim"
QUEUE_INDEX = "ix_user_operations_queue"
QUEUE_ORDER: list[str | TextClause] = [text("priority DESC"), "fair_tag", "not_before"]


def upgrade() -> None:
    ddl.create_index(QUEUE_INDEX, TABLE, ["state", "held_until", *QUEUE_ORDER])
    ddl.drop_index(CLAIM_INDEX, TABLE)
    ddl.create_index(CLAIM_INDEX, TABLE, ["state", "held_until", "task_type", *QUEUE_ORDER])


def downgrade() -> None:
    ddl.drop_index(CLAIM_INDEX, TABLE)
    ddl.create_index(CLAIM_INDEX, TABLE, ["state", "held_until", *QUEUE_ORDER])
    ddl.drop_index(QUEUE_INDEX, TABLE)
