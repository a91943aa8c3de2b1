"""Operations: the user_operations table.

Frozen: the DDL below is this revision's, written out per dialect; it does not
follow the model. The SQLite statement is, column for column, what the model
generated when this revision was first applied (so ``owner_user_id``, from a
mixin, comes last there).

Revision ID: 0001_operations
Revises:
"""

from __future__ import annotations

from sqlalchemy import text

from durable_ops.migrations import ddl

revision = "0001_operations"
down_revision = None
branch_labels = None
depends_on = None

SQLITE = """
CREATE TABLE user_operations (
    id CHAR(32) NOT NULL,
    task_type VARCHAR(64) NOT NULL,
    idempotency_key VARCHAR(128) NOT NULL,
    request_hash CHAR(64) NOT NULL,
    subject_type VARCHAR(32) NOT NULL,
    subject_id VARCHAR(64) NOT NULL,
    context_ref VARCHAR(64),
    state VARCHAR(32) NOT NULL,
    priority INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    max_attempts INTEGER NOT NULL,
    retry_delay_seconds INTEGER NOT NULL,
    time_budget_seconds INTEGER,
    privacy VARCHAR(16) NOT NULL,
    progress_percent INTEGER NOT NULL,
    cancel_requested BOOLEAN NOT NULL,
    lease_token_hash CHAR(64),
    lease_expires_at DATETIME,
    next_attempt_at DATETIME,
    deadline_at DATETIME,
    created_at DATETIME NOT NULL,
    updated_at DATETIME NOT NULL,
    started_at DATETIME,
    finished_at DATETIME,
    failure_code VARCHAR(64),
    failure_message VARCHAR(512),
    provider VARCHAR(32),
    model VARCHAR(128),
    route VARCHAR(16),
    result_ref VARCHAR(64),
    owner_user_id VARCHAR(64) NOT NULL,
    CONSTRAINT pk_user_operations PRIMARY KEY (id),
    CONSTRAINT ck_user_operations_max_attempts CHECK (max_attempts BETWEEN 1 AND 10),
    CONSTRAINT ck_user_operations_progress CHECK (progress_percent BETWEEN 0 AND 100),
    CONSTRAINT uq_user_operations_owner_user_id_task_type_idempotency_key
        UNIQUE (owner_user_id, task_type, idempotency_key)
)
"""

MARIADB = """
CREATE TABLE IF NOT EXISTS user_operations (
    id CHAR(32) NOT NULL,
    owner_user_id VARCHAR(64) NOT NULL,
    task_type VARCHAR(64) NOT NULL,
    idempotency_key VARCHAR(128) NOT NULL,
    request_hash CHAR(64) NOT NULL,
    subject_type VARCHAR(32) NOT NULL,
    subject_id VARCHAR(64) NOT NULL,
    context_ref VARCHAR(64) NULL,
    state VARCHAR(32) NOT NULL,
    priority INT NOT NULL,
    attempt INT NOT NULL,
    max_attempts INT NOT NULL,
    retry_delay_seconds INT NOT NULL,
    time_budget_seconds INT NULL,
    privacy VARCHAR(16) NOT NULL,
    progress_percent INT NOT NULL,
    cancel_requested TINYINT(1) NOT NULL,
    lease_token_hash CHAR(64) NULL,
    lease_expires_at DATETIME(6) NULL,
    next_attempt_at DATETIME(6) NULL,
    deadline_at DATETIME(6) NULL,
    created_at DATETIME(6) NOT NULL,
    updated_at DATETIME(6) NOT NULL,
    started_at DATETIME(6) NULL,
    finished_at DATETIME(6) NULL,
    failure_code VARCHAR(64) NULL,
    failure_message VARCHAR(512) NULL,
    provider VARCHAR(32) NULL,
    model VARCHAR(128) NULL,
    route VARCHAR(16) NULL,
    result_ref VARCHAR(64) NULL,
    CONSTRAINT pk_user_operations PRIMARY KEY (id),
    CONSTRAINT uq_user_operations_owner_user_id_task_type_idempotency_key
        UNIQUE (owner_user_id, task_type, idempotency_key),
    CONSTRAINT ck_user_operations_progress CHECK (progress_percent BETWEEN 0 AND 100),
    CONSTRAINT ck_user_operations_max_attempts CHECK (max_attempts BETWEEN 1 AND 10)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
"""


def upgrade() -> None:
    ddl.create_table(sqlite=SQLITE, mariadb=MARIADB)
    ddl.create_index(
        "ix_user_operations_claim",
        "user_operations",
        ["state", text("priority DESC"), "created_at"],
    )
    ddl.create_index(
        "ix_user_operations_owner_listing", "user_operations", ["owner_user_id", "created_at", "id"]
    )
    ddl.create_index(
        "ix_user_operations_state_deadline", "user_operations", ["state", "deadline_at"]
    )
    ddl.create_index(
        "ix_user_operations_owner_subject",
        "user_operations",
        ["owner_user_id", "subject_type", "subject_id"],
    )


def downgrade() -> None:
    ddl.drop_table("user_operations")
