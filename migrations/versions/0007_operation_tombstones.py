"""operation_tombstones, and the index the prune walks (ADR 0021).

A prune deletes terminal operations past the retention horizon and keeps one
tombstone per deleted operation: its id, owner, task type, idempotency key,
request fingerprint, final state and finish and deletion times (no content),
so a create that repeats a pruned key is refused instead of running again.
``(owner_user_id, task_type, idempotency_key)`` is unique, as on
``user_operations``; ``finished_at`` orders the tombstones' own, longer expiry.

``ix_user_operations_finished (finished_at)`` lets each prune batch read the
oldest finished operations without scanning the table; unfinished operations
have no ``finished_at``.

Galera-safe: one new InnoDB table with a primary key, and one ``ADD INDEX``
that InnoDB builds online; both replicated in total order (TOI). The index
build holds the cluster for as long as it takes on a large table: run this
revision at a quiet time there.

Frozen: the DDL below is this revision's, written out per dialect; it does not
follow the model.

Revision ID: 0007_operation_tombstones
Revises: 0006_operation_attempts
"""

from __future__ import annotations

from durable_ops.migrations import ddl

revision = "0007_operation_tombstones"
down_revision = "0006_operation_attempts"
branch_labels = None
depends_on = None

SQLITE = """
CREATE TABLE operation_tombstones (
    id CHAR(32) NOT NULL,
    task_type VARCHAR(64) NOT NULL,
    idempotency_key VARCHAR(128) NOT NULL,
    request_hash CHAR(64) NOT NULL,
    final_state VARCHAR(32) NOT NULL,
    finished_at DATETIME NOT NULL,
    deleted_at DATETIME NOT NULL,
    owner_user_id VARCHAR(64) NOT NULL,
    CONSTRAINT pk_operation_tombstones PRIMARY KEY (id),
    CONSTRAINT uq_operation_tombstones_owner_user_id_task_type_idempotency_key
        UNIQUE (owner_user_id, task_type, idempotency_key)
)
"""

MARIADB = """
CREATE TABLE IF NOT EXISTS operation_tombstones (
    id CHAR(32) NOT NULL,
    owner_user_id VARCHAR(64) NOT NULL,
    task_type VARCHAR(64) NOT NULL,
    idempotency_key VARCHAR(128) NOT NULL,
    request_hash CHAR(64) NOT NULL,
    final_state VARCHAR(32) NOT NULL,
    finished_at DATETIME(6) NOT NULL,
    deleted_at DATETIME(6) NOT NULL,
    CONSTRAINT pk_operation_tombstones PRIMARY KEY (id),
    CONSTRAINT uq_operation_tombstones_owner_user_id_task_type_idempotency_key
        UNIQUE (owner_user_id, task_type, idempotency_key),
    KEY ix_operation_tombstones_finished_at (finished_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
"""


def upgrade() -> None:
    ddl.create_table(sqlite=SQLITE, mariadb=MARIADB)
    # Already part of the MariaDB table.
    ddl.create_index("ix_operation_tombstones_finished_at", "operation_tombstones", ["finished_at"])
    ddl.create_index("ix_user_operations_finished_at", "user_operations", ["finished_at"])


def downgrade() -> None:
    ddl.drop_table("operation_tombstones")
    ddl.drop_index("ix_user_operations_finished_at", "user_operations")
