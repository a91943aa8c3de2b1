"""ai_answer_drafts: the answer a running attempt has written so far (issue 39, point 1).

One row per operation, the owner's content beside the workspace notes and
never in the operation row: ``lease_token_hash`` names the attempt that wrote
it (a new attempt replaces the row), ``attempt`` its number for the page.
The operation's end deletes the row; ``ix_ai_answer_drafts_updated_at``
serves retention's delete of a row left behind. Deleting the operation
deletes its draft (ON DELETE CASCADE).

``ix_user_operations_owner_updated`` serves an owner's watch (``WatchOwner``,
issue 39 point 2): what of the owner's operations changed since a time.

Galera-safe: one new InnoDB table with a primary key and one index added to
``user_operations`` (an online ALTER), both replicated in total order (TOI).

Frozen: the DDL below is this revision's, written out per dialect; it does not
follow the model.

Revision ID: 0009_answer_drafts
Revises: 0008_user_sessions
"""

from __future__ import annotations

from durable_ops.migrations import ddl

revision = "0009_answer_drafts"
down_revision = "0008_user_sessions"
branch_labels = None
depends_on = None

DRAFTS_SQLITE = """
CREATE TABLE ai_answer_drafts (
    operation_id CHAR(32) NOT NULL,
    attempt INTEGER NOT NULL,
    lease_token_hash CHAR(64) NOT NULL,
    body TEXT NOT NULL,
    updated_at DATETIME NOT NULL,
    owner_user_id VARCHAR(64) NOT NULL,
    CONSTRAINT pk_ai_answer_drafts PRIMARY KEY (operation_id),
    CONSTRAINT fk_ai_answer_drafts_operation_id_user_operations
        FOREIGN KEY(operation_id) REFERENCES user_operations (id) ON DELETE CASCADE
)
"""

DRAFTS_MARIADB = """
CREATE TABLE IF NOT EXISTS ai_answer_drafts (
    operation_id CHAR(32) NOT NULL,
    owner_user_id VARCHAR(64) NOT NULL,
    attempt INTEGER NOT NULL,
    lease_token_hash CHAR(64) NOT NULL,
    body MEDIUMTEXT NOT NULL,
    updated_at DATETIME(6) NOT NULL,
    CONSTRAINT pk_ai_answer_drafts PRIMARY KEY (operation_id),
    CONSTRAINT fk_ai_answer_drafts_operation_id_user_operations
        FOREIGN KEY (operation_id) REFERENCES user_operations (id) ON DELETE CASCADE,
    KEY ix_ai_answer_drafts_updated_at (updated_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
"""


def upgrade() -> None:
    ddl.create_table(sqlite=DRAFTS_SQLITE, mariadb=DRAFTS_MARIADB)
    # Already part of the MariaDB table.
    ddl.create_index("ix_ai_answer_drafts_updated_at", "ai_answer_drafts", ["updated_at"])
    ddl.create_index(
        "ix_user_operations_owner_updated", "user_operations", ["owner_user_id", "updated_at"]
    )


def downgrade() -> None:
    ddl.drop_index("ix_user_operations_owner_updated", "user_operations")
    ddl.drop_table("ai_answer_drafts")
