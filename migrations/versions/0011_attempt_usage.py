"""Usage on every attempt and its totals on the operation (issue 36, ADR 0038).

``operation_attempts`` gains ``prompt_tokens``, ``completion_tokens`` and
``model_ms`` (INT NULL): what the settlement that ended the attempt reported of
its model calls; NULL when nothing was (an attempt that never reached the
model, or whose lease expired). ``user_operations`` gains the same three as
BIGINT NOT NULL DEFAULT 0: the sums over its attempts, written by the same
transition that writes an attempt's figures. Existing rows read 0 and NULL:
nothing was recorded for them.

Galera-safe: two online ``ADD COLUMN``s (instant on MariaDB ≥ 10.3), each
idempotent, replicated in total order (TOI); no row is rewritten.

Frozen: the DDL below is this revision's, written out per dialect; it does not
follow the model.

Revision ID: 0011_attempt_usage
Revises: 0010_owner_storage
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from durable_ops.migrations import ddl

revision = "0011_attempt_usage"
down_revision = "0010_owner_storage"
branch_labels = None
depends_on = None

COLUMNS = ("prompt_tokens", "completion_tokens", "model_ms")


def upgrade() -> None:
    if ddl.is_mariadb():
        op.execute(
            "ALTER TABLE operation_attempts "
            + ", ".join(f"ADD COLUMN IF NOT EXISTS {name} INT NULL" for name in COLUMNS)
        )
        op.execute(
            "ALTER TABLE user_operations "
            + ", ".join(
                f"ADD COLUMN IF NOT EXISTS {name} BIGINT NOT NULL DEFAULT 0" for name in COLUMNS
            )
        )
        return
    with ddl.sqlite_batch_alter_table("operation_attempts") as batch:
        for name in COLUMNS:
            batch.add_column(sa.Column(name, sa.Integer(), nullable=True))
    with ddl.sqlite_batch_alter_table("user_operations") as batch:
        for name in COLUMNS:
            batch.add_column(
                sa.Column(name, sa.BigInteger(), nullable=False, server_default=sa.text("0"))
            )


def downgrade() -> None:
    if ddl.is_mariadb():
        for table in ("user_operations", "operation_attempts"):
            op.execute(
                f"ALTER TABLE {table} "
                + ", ".join(f"DROP COLUMN IF EXISTS {name}" for name in COLUMNS)
            )
        return
    for table in ("user_operations", "operation_attempts"):
        with ddl.sqlite_batch_alter_table(table) as batch:
            for name in COLUMNS:
                batch.drop_column(name)
