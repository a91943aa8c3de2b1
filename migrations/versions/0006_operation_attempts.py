"""operation_attempts: one row per attempt (per lease), from its claim to its end.

A claim inserts the row (attempt number, route, start, lease expiry) in its
own transaction; the transition that ends the attempt (completion, failure,
fallback, acknowledged cancel, the sweeper's lease expiry or deadline) writes
its outcome, end, failure code and message and the provider/model provenance
in the same transaction. The row is the owner's (``owner_user_id``) and goes
with its operation (``ON DELETE CASCADE``).

The primary key ``id`` is derived from the attempt's lease token hash, so the
UPDATE that ends an attempt is a primary-key write. A manual retry counts
attempts from 1 again, so ``(operation_id, attempt, route)`` is not unique over
an operation's whole history; the index ``(operation_id, started_at)`` reads
an operation's attempts in order and serves the foreign key.

Galera-safe: one new InnoDB table with a primary key; created in total order
(TOI) in a moment, touching no existing row.

Frozen: the DDL below is this revision's, written out per dialect; it does not
follow the model.

Revision ID: 0006_operation_attempts
Revises: 0005_admission_reservations
"""

from __future__ import annotations

from durable_ops.migrations import ddl

revision = "0006_operation_attempts"
down_revision = "0005_admission_reservations"
branch_labels = None
depends_on = None

SQLITE = """
CREATE TABLE operation_attempts (
    id CHAR(32) NOT NULL,
    operation_id CHAR(32) NOT NULL,
    attempt INTEGER NOT NULL,
    route VARCHAR(16) NOT NULL,
    started_at DATETIME NOT NULL,
    lease_expires_at DATETIME NOT NULL,
    ended_at DATETIME,
    outcome VARCHAR(32),
    failure_code VARCHAR(64),
    failure_message VARCHAR(512),
    provider VARCHAR(32),
    model VARCHAR(128),
    owner_user_id VARCHAR(64) NOT NULL,
    CONSTRAINT pk_operation_attempts PRIMARY KEY (id),
    CONSTRAINT fk_operation_attempts_operation_id_user_operations
        FOREIGN KEY(operation_id) REFERENCES user_operations (id) ON DELETE CASCADE
)
"""

MARIADB = """
CREATE TABLE IF NOT EXISTS operation_attempts (
    id CHAR(32) NOT NULL,
    owner_user_id VARCHAR(64) NOT NULL,
    operation_id CHAR(32) NOT NULL,
    attempt INT NOT NULL,
    route VARCHAR(16) NOT NULL,
    started_at DATETIME(6) NOT NULL,
    lease_expires_at DATETIME(6) NOT NULL,
    ended_at DATETIME(6) NULL,
    outcome VARCHAR(32) NULL,
    failure_code VARCHAR(64) NULL,
    failure_message VARCHAR(512) NULL,
    provider VARCHAR(32) NULL,
    model VARCHAR(128) NULL,
    CONSTRAINT pk_operation_attempts PRIMARY KEY (id),
    KEY ix_operation_attempts_operation (operation_id, started_at),
    CONSTRAINT fk_operation_attempts_operation_id_user_operations
        FOREIGN KEY (operation_id) REFERENCES user_operations (id) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
"""


def upgrade() -> None:
    ddl.create_table(sqlite=SQLITE, mariadb=MARIADB)
    # Already part of the MariaDB table (so the foreign key gets no index of its own).
    ddl.create_index(
        "ix_operation_attempts_operation", "operation_attempts", ["operation_id", "started_at"]
    )


def downgrade() -> None:
    ddl.drop_table("operation_attempts")
