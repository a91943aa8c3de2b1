"""operator_console_sessions: the operator console's sign-ins (issue 37, point 5; ADR 0045).

One row per one-time sign-in link (``kind='link'``, made by ``opsctl console
link``) or console session (``kind='session'``, made by opening a link): the
SHA-256 of the random value handed out (the primary key, so resolving a
cookie is one key read), the operator's name, and when it was made and
expires. ``ix_operator_console_sessions_expires_at`` serves the prune of
expired rows.

Galera-safe: one new InnoDB table with a primary key, replicated in total
order (TOI); nothing existing is altered.

Frozen: the DDL below is this revision's, written out per dialect; it does not
follow the model.

Revision ID: 0014_operator_console_sessions
Revises: 0013_token_budgets
"""

from __future__ import annotations

from durable_ops.migrations import ddl

revision = "0014_operator_console_sessions"
down_revision = "0013_token_budgets"
branch_labels = None
depends_on = None

SQLITE = """
CREATE TABLE operator_console_sessions (
    id CHAR(64) NOT NULL,
    kind VARCHAR(8) NOT NULL,
    operator VARCHAR(64) NOT NULL,
    created_at DATETIME NOT NULL,
    expires_at DATETIME NOT NULL,
    CONSTRAINT pk_operator_console_sessions PRIMARY KEY (id)
)
"""

MARIADB = """
CREATE TABLE IF NOT EXISTS operator_console_sessions (
    id CHAR(64) NOT NULL,
    kind VARCHAR(8) NOT NULL,
    operator VARCHAR(64) NOT NULL,
    created_at DATETIME(6) NOT NULL,
    expires_at DATETIME(6) NOT NULL,
    CONSTRAINT pk_operator_console_sessions PRIMARY KEY (id),
    KEY ix_operator_console_sessions_expires_at (expires_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
"""


def upgrade() -> None:
    ddl.create_table(sqlite=SQLITE, mariadb=MARIADB)
    # Already part of the MariaDB table.
    ddl.create_index(
        "ix_operator_console_sessions_expires_at", "operator_console_sessions", ["expires_at"]
    )


def downgrade() -> None:
    ddl.drop_table("operator_console_sessions")
