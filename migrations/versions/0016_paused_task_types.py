"""Paused task types (issue 37, point 4; ADR 0047).

``paused_task_types``: one row per task type an operator paused (``opsctl tasks
pause``), with who paused it and when; ``resume`` deletes it. The claim leaves out
the operations of every type named here.

Galera-safe: one new InnoDB table with a primary key, created idempotently,
replicated in total order (TOI).

Frozen: the DDL below is this revision's, written out per dialect.

Revision ID: 0016_paused_task_types
Revises: 0015_scheduled_operations
"""

from __future__ import annotations

from durable_ops.migrations import ddl

revision = "0016_paused_task_types"
down_revision = "0015_scheduled_operations"
branch_labels = None
depends_on = None

SQLITE = """
CREATE TABLE paused_task_types (
    task_type VARCHAR(64) NOT NULL,
    paused_by VARCHAR(64) NOT NULL,
    paused_at DATETIME NOT NULL,
    CONSTRAINT pk_paused_task_types PRIMARY KEY (task_type)
)
"""

MARIADB = """
CREATE TABLE IF NOT EXISTS paused_task_types (
    task_type VARCHAR(64) NOT NULL,
    paused_by VARCHAR(64) NOT NULL,
    paused_at DATETIME(6) NOT NULL,
    CONSTRAINT pk_paused_task_types PRIMARY KEY (task_type)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
"""


def upgrade() -> None:
    ddl.create_table(sqlite=SQLITE, mariadb=MARIADB)


def downgrade() -> None:
    ddl.drop_table("paused_task_types")
