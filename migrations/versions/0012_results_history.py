"""ai_workspace_notes as history: one result per operation, several per subject (issue 39,
point 4).

Before, a note was unique per (owner, kind, subject) and a re-run overwrote it: the
page could show only the newest result, under whatever run came after it. Now:

- ``uq_ai_workspace_notes_owner_user_id_kind_subject_type_subject_id`` goes; the unique
  index ``uq_ai_workspace_notes_operation_id`` takes its place (one result per
  operation: a retried attempt finds its operation's and publishes nothing twice;
  NULLs, the results of deleted operations, do not collide), and
  ``ix_ai_workspace_notes_subject_created`` serves "the subject's results, newest first".
- A result names what made it, as it was then: ``context_ref`` and ``context_name``
  (the CV and its filename, or the job and its title) and ``provider``, ``model``,
  ``route`` (until now read from the operation, which retention deletes).

Existing notes are filled in from their operation and its second reference where these
still exist. Downgrade keeps each subject's newest result only (the old unique key).

Galera-safe: on MariaDB one ALTER TABLE (columns and indexes together, replicated in
total order), each clause idempotent, so a revision that died half way is finished by
running it again; the UPDATEs after it are idempotent too.

Frozen: the DDL below is this revision's, written out per dialect; it does not
follow the model.

Revision ID: 0012_results_history
Revises: 0011_attempt_usage
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from durable_ops.migrations import ddl

revision = "0012_results_history"
down_revision = "0011_attempt_usage"
branch_labels = None
depends_on = None

OLD_UNIQUE = "uq_ai_workspace_notes_owner_user_id_kind_subject_type_subject_id"
BY_OPERATION = "uq_ai_workspace_notes_operation_id"
BY_SUBJECT = "ix_ai_workspace_notes_subject_created"
FOREIGN_KEY = "fk_ai_workspace_notes_operation_id_user_operations"
SUBJECT_COLUMNS = ["owner_user_id", "kind", "subject_type", "subject_id", "created_at"]
NEW_COLUMNS = (
    ("context_ref", 64),
    ("context_name", 255),
    ("provider", 32),
    ("model", 128),
    ("route", 16),
)

MARIADB_UPGRADE = f"""
ALTER TABLE ai_workspace_notes
    ADD COLUMN IF NOT EXISTS context_ref VARCHAR(64) NULL,
    ADD COLUMN IF NOT EXISTS context_name VARCHAR(255) NULL,
    ADD COLUMN IF NOT EXISTS provider VARCHAR(32) NULL,
    ADD COLUMN IF NOT EXISTS model VARCHAR(128) NULL,
    ADD COLUMN IF NOT EXISTS route VARCHAR(16) NULL,
    DROP INDEX IF EXISTS {OLD_UNIQUE},
    ADD UNIQUE INDEX IF NOT EXISTS {BY_OPERATION} (operation_id),
    ADD INDEX IF NOT EXISTS {BY_SUBJECT} ({", ".join(SUBJECT_COLUMNS)})
"""

# From the operation that published it (its columns there have the same names).
FILL_FROM_OPERATION = [
    "UPDATE ai_workspace_notes SET context_ref = (SELECT o.context_ref FROM user_operations o"
    " WHERE o.id = ai_workspace_notes.operation_id)"
    " WHERE operation_id IS NOT NULL AND context_ref IS NULL",
    "UPDATE ai_workspace_notes SET provider = (SELECT o.provider FROM user_operations o"
    " WHERE o.id = ai_workspace_notes.operation_id)"
    " WHERE operation_id IS NOT NULL AND provider IS NULL",
    "UPDATE ai_workspace_notes SET model = (SELECT o.model FROM user_operations o"
    " WHERE o.id = ai_workspace_notes.operation_id)"
    " WHERE operation_id IS NOT NULL AND model IS NULL",
    "UPDATE ai_workspace_notes SET route = (SELECT o.route FROM user_operations o"
    " WHERE o.id = ai_workspace_notes.operation_id)"
    " WHERE operation_id IS NOT NULL AND route IS NULL",
]
# The second reference's name: a job's result was made with a CV, a CV's with a job.
FILL_CONTEXT_NAME = [
    "UPDATE ai_workspace_notes SET context_name = (SELECT r.filename FROM attachments r"
    " WHERE r.id = ai_workspace_notes.context_ref"
    " AND r.owner_user_id = ai_workspace_notes.owner_user_id)"
    " WHERE subject_type = 'job' AND context_ref IS NOT NULL AND context_name IS NULL",
    "UPDATE ai_workspace_notes SET context_name = (SELECT r.title FROM jobs r"
    " WHERE r.id = ai_workspace_notes.context_ref"
    " AND r.owner_user_id = ai_workspace_notes.owner_user_id)"
    " WHERE subject_type = 'attachment' AND context_ref IS NOT NULL AND context_name IS NULL",
]

# All but each subject's newest result, in a derived table (MariaDB refuses a DELETE whose
# subquery reads the table it deletes from).
DELETE_OLDER = """
DELETE FROM ai_workspace_notes WHERE id IN (SELECT id FROM (
    SELECT n.id FROM ai_workspace_notes n JOIN ai_workspace_notes newer
        ON newer.owner_user_id = n.owner_user_id AND newer.kind = n.kind
        AND newer.subject_type = n.subject_type AND newer.subject_id = n.subject_id
        AND (newer.created_at > n.created_at
             OR (newer.created_at = n.created_at AND newer.id > n.id))
) older)
"""


def upgrade() -> None:
    if ddl.is_mariadb():
        op.execute(MARIADB_UPGRADE)
    else:
        with ddl.sqlite_batch_alter_table("ai_workspace_notes") as batch:
            for name, length in NEW_COLUMNS:
                batch.add_column(sa.Column(name, sa.String(length), nullable=True))
            batch.drop_constraint(OLD_UNIQUE, type_="unique")
        ddl.create_index(BY_OPERATION, "ai_workspace_notes", ["operation_id"], unique=True)
        ddl.create_index(BY_SUBJECT, "ai_workspace_notes", SUBJECT_COLUMNS)
    for statement in (*FILL_FROM_OPERATION, *FILL_CONTEXT_NAME):
        op.execute(statement)


def downgrade() -> None:
    op.execute(DELETE_OLDER)
    unique = ["owner_user_id", "kind", "subject_type", "subject_id"]
    if ddl.is_mariadb():
        columns = ", ".join(f"DROP COLUMN IF EXISTS {name}" for name, _ in NEW_COLUMNS)
        op.execute(
            # The foreign key's own index first: the unique one served it, and MariaDB
            # drops no index a foreign key needs.
            f"ALTER TABLE ai_workspace_notes ADD INDEX IF NOT EXISTS {FOREIGN_KEY} (operation_id),"
            f" DROP INDEX IF EXISTS {BY_SUBJECT},"
            f" DROP INDEX IF EXISTS {BY_OPERATION}, {columns},"
            f" ADD UNIQUE INDEX IF NOT EXISTS {OLD_UNIQUE} ({', '.join(unique)})"
        )
    else:
        ddl.drop_index(BY_SUBJECT, "ai_workspace_notes")
        ddl.drop_index(BY_OPERATION, "ai_workspace_notes")
        with ddl.sqlite_batch_alter_table("ai_workspace_notes") as batch:
            for name, _ in NEW_COLUMNS:
                batch.drop_column(name)
            batch.create_unique_constraint(OLD_UNIQUE, unique)
