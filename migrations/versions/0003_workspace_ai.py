"""Workspace and AI: jobs, attachments, AI settings, workspace notes, admission control.

Job descriptions (≤ 20,000 characters) and CV text (≤ 200,000) exceed what
MariaDB lets a row hold as VARCHAR in utf8mb4, so those two columns and the
note body are MEDIUMTEXT/TEXT; every other column is bounded.

Frozen: the DDL below is this revision's, written out per dialect; it does not
follow the model.

Revision ID: 0003_workspace_ai
Revises: 0002_notifications
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import text

from durable_ops.migrations import ddl

revision = "0003_workspace_ai"
down_revision = "0002_notifications"
branch_labels = None
depends_on = None

# (table, SQLite DDL, MariaDB DDL), in creation order.
TABLES = [
    (
        "jobs",
        """
CREATE TABLE jobs (
    id CHAR(32) NOT NULL,
    title VARCHAR(200) NOT NULL,
    company VARCHAR(200) NOT NULL,
    description TEXT NOT NULL,
    created_at DATETIME NOT NULL,
    updated_at DATETIME NOT NULL,
    owner_user_id VARCHAR(64) NOT NULL,
    CONSTRAINT pk_jobs PRIMARY KEY (id)
)""",
        """
CREATE TABLE IF NOT EXISTS jobs (
    id CHAR(32) NOT NULL,
    owner_user_id VARCHAR(64) NOT NULL,
    title VARCHAR(200) NOT NULL,
    company VARCHAR(200) NOT NULL,
    description MEDIUMTEXT NOT NULL,
    created_at DATETIME(6) NOT NULL,
    updated_at DATETIME(6) NOT NULL,
    CONSTRAINT pk_jobs PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin""",
    ),
    (
        "attachments",
        """
CREATE TABLE attachments (
    id CHAR(32) NOT NULL,
    kind VARCHAR(16) NOT NULL,
    filename VARCHAR(255) NOT NULL,
    text TEXT NOT NULL,
    created_at DATETIME NOT NULL,
    owner_user_id VARCHAR(64) NOT NULL,
    CONSTRAINT pk_attachments PRIMARY KEY (id)
)""",
        """
CREATE TABLE IF NOT EXISTS attachments (
    id CHAR(32) NOT NULL,
    owner_user_id VARCHAR(64) NOT NULL,
    kind VARCHAR(16) NOT NULL,
    filename VARCHAR(255) NOT NULL,
    text MEDIUMTEXT NOT NULL,
    created_at DATETIME(6) NOT NULL,
    CONSTRAINT pk_attachments PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin""",
    ),
    (
        "user_ai_settings",
        # Quoted as the model generated it: PLAN is an SQLite keyword (EXPLAIN QUERY PLAN).
        """
CREATE TABLE user_ai_settings (
    id CHAR(32) NOT NULL,
    ai_enabled BOOLEAN NOT NULL,
    privacy VARCHAR(16) NOT NULL,
    "plan" VARCHAR(8) NOT NULL,
    updated_at DATETIME NOT NULL,
    owner_user_id VARCHAR(64) NOT NULL,
    CONSTRAINT pk_user_ai_settings PRIMARY KEY (id),
    CONSTRAINT uq_user_ai_settings_owner_user_id UNIQUE (owner_user_id)
)""",
        """
CREATE TABLE IF NOT EXISTS user_ai_settings (
    id CHAR(32) NOT NULL,
    owner_user_id VARCHAR(64) NOT NULL,
    ai_enabled TINYINT(1) NOT NULL,
    privacy VARCHAR(16) NOT NULL,
    plan VARCHAR(8) NOT NULL,
    updated_at DATETIME(6) NOT NULL,
    CONSTRAINT pk_user_ai_settings PRIMARY KEY (id),
    CONSTRAINT uq_user_ai_settings_owner_user_id UNIQUE (owner_user_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin""",
    ),
    (
        "ai_workspace_notes",
        """
CREATE TABLE ai_workspace_notes (
    id CHAR(32) NOT NULL,
    kind VARCHAR(64) NOT NULL,
    subject_type VARCHAR(32) NOT NULL,
    subject_id VARCHAR(64) NOT NULL,
    operation_id CHAR(32),
    body TEXT NOT NULL,
    created_at DATETIME NOT NULL,
    updated_at DATETIME NOT NULL,
    owner_user_id VARCHAR(64) NOT NULL,
    CONSTRAINT pk_ai_workspace_notes PRIMARY KEY (id),
    CONSTRAINT fk_ai_workspace_notes_operation_id_user_operations
        FOREIGN KEY(operation_id) REFERENCES user_operations (id) ON DELETE SET NULL,
    CONSTRAINT uq_ai_workspace_notes_owner_user_id_kind_subject_type_subject_id
        UNIQUE (owner_user_id, kind, subject_type, subject_id)
)""",
        """
CREATE TABLE IF NOT EXISTS ai_workspace_notes (
    id CHAR(32) NOT NULL,
    owner_user_id VARCHAR(64) NOT NULL,
    kind VARCHAR(64) NOT NULL,
    subject_type VARCHAR(32) NOT NULL,
    subject_id VARCHAR(64) NOT NULL,
    operation_id CHAR(32) NULL,
    body TEXT NOT NULL,
    created_at DATETIME(6) NOT NULL,
    updated_at DATETIME(6) NOT NULL,
    CONSTRAINT pk_ai_workspace_notes PRIMARY KEY (id),
    CONSTRAINT uq_ai_workspace_notes_owner_user_id_kind_subject_type_subject_id
        UNIQUE (owner_user_id, kind, subject_type, subject_id),
    CONSTRAINT fk_ai_workspace_notes_operation_id_user_operations
        FOREIGN KEY (operation_id) REFERENCES user_operations (id) ON DELETE SET NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin""",
    ),
    (
        "ai_admission_control",
        """
CREATE TABLE ai_admission_control (
    id VARCHAR(16) NOT NULL,
    ai_enabled BOOLEAN NOT NULL,
    updated_at DATETIME NOT NULL,
    CONSTRAINT pk_ai_admission_control PRIMARY KEY (id)
)""",
        """
CREATE TABLE IF NOT EXISTS ai_admission_control (
    id VARCHAR(16) NOT NULL,
    ai_enabled TINYINT(1) NOT NULL,
    updated_at DATETIME(6) NOT NULL,
    CONSTRAINT pk_ai_admission_control PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin""",
    ),
]


def upgrade() -> None:
    for _table, sqlite, mariadb in TABLES:
        ddl.create_table(sqlite=sqlite, mariadb=mariadb)
    for table in ("jobs", "attachments"):
        ddl.create_index(f"ix_{table}_owner_listing", table, ["owner_user_id", "created_at", "id"])
    # The global AI switch starts on; the per-user setting starts off.
    op.execute(
        text(
            "INSERT INTO ai_admission_control (id, ai_enabled, updated_at) "
            "SELECT 'global', 1, CURRENT_TIMESTAMP "
            "WHERE NOT EXISTS (SELECT 1 FROM ai_admission_control WHERE id = 'global')"
        )
    )


def downgrade() -> None:
    for table, _sqlite, _mariadb in reversed(TABLES):
        ddl.drop_table(table)
