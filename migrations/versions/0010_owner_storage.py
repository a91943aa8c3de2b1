"""owner_storage: what each owner stores, for the per-owner quota (issue 35, point 7).

One row per owner counts its jobs, its CVs and the UTF-8 bytes of their texts;
a create takes its share with one guarded UPDATE of the row. The upgrade fills
the rows of the owners that already store something, so the quota counts what
was written before it.

Galera-safe: one new InnoDB table with a primary key (TOI), then one
INSERT … SELECT, replicated as a write set.

Frozen: the DDL below is this revision's, written out per dialect; it does not
follow the model.

Revision ID: 0010_owner_storage
Revises: 0009_answer_drafts
"""

from __future__ import annotations

from alembic import op

from durable_ops.migrations import ddl

revision = "0010_owner_storage"
down_revision = "0009_answer_drafts"
branch_labels = None
depends_on = None

STORAGE_SQLITE = """
CREATE TABLE owner_storage (
    jobs INTEGER NOT NULL,
    attachments INTEGER NOT NULL,
    stored_bytes BIGINT NOT NULL,
    owner_user_id VARCHAR(64) NOT NULL,
    CONSTRAINT pk_owner_storage PRIMARY KEY (owner_user_id)
)
"""

STORAGE_MARIADB = """
CREATE TABLE IF NOT EXISTS owner_storage (
    owner_user_id VARCHAR(64) NOT NULL,
    jobs INTEGER NOT NULL,
    attachments INTEGER NOT NULL,
    stored_bytes BIGINT NOT NULL,
    CONSTRAINT pk_owner_storage PRIMARY KEY (owner_user_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
"""

# Bytes as the service counts them: UTF-8 (SQLite's LENGTH counts characters of a TEXT,
# bytes of a BLOB; MariaDB's counts bytes, and the tables are utf8mb4).
FILL = """
INSERT INTO owner_storage (owner_user_id, jobs, attachments, stored_bytes)
SELECT owner_user_id, SUM(jobs), SUM(attachments), SUM(stored_bytes) FROM (
    SELECT owner_user_id, 1 AS jobs, 0 AS attachments,
           {title} + {company} + {description} AS stored_bytes
    FROM jobs
    UNION ALL
    SELECT owner_user_id, 0, 1, {filename} + {text} FROM attachments
) AS stored
GROUP BY owner_user_id
"""


def upgrade() -> None:
    ddl.create_table(sqlite=STORAGE_SQLITE, mariadb=STORAGE_MARIADB)
    template = "LENGTH({})" if ddl.is_mariadb() else "LENGTH(CAST({} AS BLOB))"
    columns = ("title", "company", "description", "filename", "text")
    op.execute(FILL.format(**{name: template.format(name) for name in columns}))


def downgrade() -> None:
    ddl.drop_table("owner_storage")
