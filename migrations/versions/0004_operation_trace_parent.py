"""The admitting request's W3C ``traceparent`` on each operation (tracing, docs/tracing.md).

``trace_parent VARCHAR(55)`` nullable: ``00-<32 hex>-<16 hex>-<2 hex>``, written
only while tracing is on; the worker links its spans to it. Never user content.

Frozen: the DDL below is this revision's, written out per dialect; it does not
follow the model.

Revision ID: 0004_operation_trace_parent
Revises: 0003_workspace_ai
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from durable_ops.migrations import ddl

revision = "0004_operation_trace_parent"
down_revision = "0003_workspace_ai"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if ddl.is_mariadb():
        op.execute(
            "ALTER TABLE user_operations ADD COLUMN IF NOT EXISTS trace_parent VARCHAR(55) NULL"
        )
    else:
        with ddl.sqlite_batch_alter_table("user_operations") as batch:
            batch.add_column(sa.Column("trace_parent", sa.String(55), nullable=True))


def downgrade() -> None:
    if ddl.is_mariadb():
        op.execute("ALTER TABLE user_operations DROP COLUMN IF EXISTS trace_parent")
    else:
        with ddl.sqlite_batch_alter_table("user_operations") as batch:
            batch.drop_column("trace_parent")
