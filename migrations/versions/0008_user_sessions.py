"""user_sessions and user_token_floors: sign-ins that end (issue 35, point 5).

``user_sessions`` holds one row per browser sign-in: the SHA-256 of the
cookie's random id (the primary key, so a cookie is resolved by one key read;
the id itself is never stored), its owner, when it was made and when it
expires. ``ix_user_sessions_owner_user_id`` serves revoking every session of
a user, ``ix_user_sessions_expires_at`` the prune of expired ones.

``user_token_floors`` holds, per user, the time before which that user's
tokens were revoked: a token whose ``iat`` is earlier is refused. Keyed by
the owner, so the check is one key read too.

Galera-safe: two new InnoDB tables with primary keys, replicated in total
order (TOI); nothing existing is altered.

Frozen: the DDL below is this revision's, written out per dialect; it does not
follow the model.

Revision ID: 0008_user_sessions
Revises: 0007_operation_tombstones
"""

from __future__ import annotations

from durable_ops.migrations import ddl

revision = "0008_user_sessions"
down_revision = "0007_operation_tombstones"
branch_labels = None
depends_on = None

SESSIONS_SQLITE = """
CREATE TABLE user_sessions (
    id CHAR(64) NOT NULL,
    created_at DATETIME NOT NULL,
    expires_at DATETIME NOT NULL,
    owner_user_id VARCHAR(64) NOT NULL,
    CONSTRAINT pk_user_sessions PRIMARY KEY (id)
)
"""

SESSIONS_MARIADB = """
CREATE TABLE IF NOT EXISTS user_sessions (
    id CHAR(64) NOT NULL,
    owner_user_id VARCHAR(64) NOT NULL,
    created_at DATETIME(6) NOT NULL,
    expires_at DATETIME(6) NOT NULL,
    CONSTRAINT pk_user_sessions PRIMARY KEY (id),
    KEY ix_user_sessions_owner_user_id (owner_user_id),
    KEY ix_user_sessions_expires_at (expires_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
"""

FLOORS_SQLITE = """
CREATE TABLE user_token_floors (
    owner_user_id VARCHAR(64) NOT NULL,
    not_before DATETIME NOT NULL,
    CONSTRAINT pk_user_token_floors PRIMARY KEY (owner_user_id)
)
"""

FLOORS_MARIADB = """
CREATE TABLE IF NOT EXISTS user_token_floors (
    owner_user_id VARCHAR(64) NOT NULL,
    not_before DATETIME(6) NOT NULL,
    CONSTRAINT pk_user_token_floors PRIMARY KEY (owner_user_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
"""


def upgrade() -> None:
    ddl.create_table(sqlite=SESSIONS_SQLITE, mariadb=SESSIONS_MARIADB)
    # Already part of the MariaDB table.
    ddl.create_index("ix_user_sessions_owner_user_id", "user_sessions", ["owner_user_id"])
    ddl.create_index("ix_user_sessions_expires_at", "user_sessions", ["expires_at"])
    ddl.create_table(sqlite=FLOORS_SQLITE, mariadb=FLOORS_MARIADB)


def downgrade() -> None:
    ddl.drop_table("user_token_floors")
    ddl.drop_table("user_sessions")
