"""``ai_admission_control.reservations``: the write every capacity reservation makes.

``reservations BIGINT NOT NULL DEFAULT 0``, bumped by each admission that
creates an operation, in the same transaction as its count and INSERT. A row
lock (``SELECT … FOR UPDATE``) serialises admissions on one server, but on a
Galera cluster it does not reach other nodes; a write to the same row does:
two admissions through two nodes now carry the same certification key, so one
of them fails certification (1213) and is replayed on fresh counts (ADR 0017).

Galera-safe: one ``ADD COLUMN`` with a constant default is instant on
MariaDB ≥ 10.3 and replicated in total order (TOI) in a moment.

Frozen: the DDL below is this revision's, written out per dialect; it does not
follow the model.

Revision ID: 0005_admission_reservations
Revises: 0004_operation_trace_parent
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from durable_ops.migrations import ddl

revision = "0005_admission_reservations"
down_revision = "0004_operation_trace_parent"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if ddl.is_mariadb():
        op.execute(
            "ALTER TABLE ai_admission_control"
            " ADD COLUMN IF NOT EXISTS reservations BIGINT NOT NULL DEFAULT 0"
        )
    else:
        with ddl.sqlite_batch_alter_table("ai_admission_control") as batch:
            batch.add_column(
                sa.Column("reservations", sa.BigInteger(), nullable=False, server_default="0")
            )


def downgrade() -> None:
    if ddl.is_mariadb():
        op.execute("ALTER TABLE ai_admission_control DROP COLUMN IF EXISTS reservations")
    else:
        with ddl.sqlite_batch_alter_table("ai_admission_control") as batch:
            batch.drop_column("reservations")
