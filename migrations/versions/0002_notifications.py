"""Notifications: user_notifications, one current row per operation.

Frozen: the DDL below is this revision's, written out per dialect; it does not
follow the model.

Revision ID: 0002_notifications
Revises: 0001_operations
"""

from __future__ import annotations

from durable_ops.migrations import ddl

revision = "0002_notifications"
down_revision = "0001_operations"
branch_labels = None
depends_on = None

SQLITE = """
CREATE TABLE user_notifications (
    id CHAR(32) NOT NULL,
    operation_id CHAR(32),
    task_type VARCHAR(64) NOT NULL,
    outcome VARCHAR(16) NOT NULL,
    title VARCHAR(120) NOT NULL,
    body VARCHAR(240) NOT NULL,
    created_at DATETIME NOT NULL,
    read_at DATETIME,
    dismissed_at DATETIME,
    owner_user_id VARCHAR(64) NOT NULL,
    CONSTRAINT pk_user_notifications PRIMARY KEY (id),
    CONSTRAINT uq_user_notifications_operation_id UNIQUE (operation_id),
    CONSTRAINT fk_user_notifications_operation_id_user_operations
        FOREIGN KEY(operation_id) REFERENCES user_operations (id) ON DELETE SET NULL
)
"""

MARIADB = """
CREATE TABLE IF NOT EXISTS user_notifications (
    id CHAR(32) NOT NULL,
    owner_user_id VARCHAR(64) NOT NULL,
    operation_id CHAR(32) NULL,
    task_type VARCHAR(64) NOT NULL,
    outcome VARCHAR(16) NOT NULL,
    title VARCHAR(120) NOT NULL,
    body VARCHAR(240) NOT NULL,
    created_at DATETIME(6) NOT NULL,
    read_at DATETIME(6) NULL,
    dismissed_at DATETIME(6) NULL,
    CONSTRAINT pk_user_notifications PRIMARY KEY (id),
    CONSTRAINT uq_user_notifications_operation_id UNIQUE (operation_id),
    CONSTRAINT fk_user_notifications_operation_id_user_operations
        FOREIGN KEY (operation_id) REFERENCES user_operations (id) ON DELETE SET NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
"""


def upgrade() -> None:
    ddl.create_table(sqlite=SQLITE, mariadb=MARIADB)
    ddl.create_index(
        "ix_user_notifications_owner_listing",
        "user_notifications",
        ["owner_user_id", "created_at", "id"],
    )


def downgrade() -> None:
    ddl.drop_table("user_notifications")
