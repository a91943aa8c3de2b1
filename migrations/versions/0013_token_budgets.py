"""Daily token budgets (issue 36, point 3; ADR 0041).

- ``token_budget_days``: per owner and UTC day, the tokens ``reserved`` by running
  analyses and ``spent`` by ended attempts; admission reserves there, the transition
  writer settles there. Indexed by day: the global budget is the day's sum.
- ``owner_token_budgets``: an operator's daily budget for one owner (``opsctl users
  set-budget``), with who set it; no row, the plan's default.
- ``user_operations`` gains ``budget_day`` (DATE NULL: the day admission reserved on;
  NULL for an operation admission did not reserve for, such as every existing one) and
  ``reserved_tokens`` (BIGINT NOT NULL DEFAULT 0: what is left of that reservation).

Galera-safe: two new InnoDB tables with primary keys and one online ``ADD COLUMN``
(instant on MariaDB ≥ 10.3), each idempotent, replicated in total order (TOI).

Frozen: the DDL below is this revision's, written out per dialect; it does not
follow the model.

Revision ID: 0013_token_budgets
Revises: 0012_results_history
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from durable_ops.migrations import ddl

revision = "0013_token_budgets"
down_revision = "0012_results_history"
branch_labels = None
depends_on = None

DAYS_SQLITE = """
CREATE TABLE token_budget_days (
    day DATE NOT NULL,
    reserved BIGINT NOT NULL,
    spent BIGINT NOT NULL,
    owner_user_id VARCHAR(64) NOT NULL,
    CONSTRAINT pk_token_budget_days PRIMARY KEY (owner_user_id, day)
)
"""

DAYS_MARIADB = """
CREATE TABLE IF NOT EXISTS token_budget_days (
    owner_user_id VARCHAR(64) NOT NULL,
    day DATE NOT NULL,
    reserved BIGINT NOT NULL,
    spent BIGINT NOT NULL,
    CONSTRAINT pk_token_budget_days PRIMARY KEY (owner_user_id, day),
    KEY ix_token_budget_days_day (day)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
"""

OVERRIDES_SQLITE = """
CREATE TABLE owner_token_budgets (
    daily_tokens BIGINT NOT NULL,
    set_by VARCHAR(64) NOT NULL,
    updated_at DATETIME NOT NULL,
    owner_user_id VARCHAR(64) NOT NULL,
    CONSTRAINT pk_owner_token_budgets PRIMARY KEY (owner_user_id)
)
"""

OVERRIDES_MARIADB = """
CREATE TABLE IF NOT EXISTS owner_token_budgets (
    owner_user_id VARCHAR(64) NOT NULL,
    daily_tokens BIGINT NOT NULL,
    set_by VARCHAR(64) NOT NULL,
    updated_at DATETIME(6) NOT NULL,
    CONSTRAINT pk_owner_token_budgets PRIMARY KEY (owner_user_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
"""


def upgrade() -> None:
    ddl.create_table(sqlite=DAYS_SQLITE, mariadb=DAYS_MARIADB)
    # Already part of the MariaDB table.
    ddl.create_index("ix_token_budget_days_day", "token_budget_days", ["day"])
    ddl.create_table(sqlite=OVERRIDES_SQLITE, mariadb=OVERRIDES_MARIADB)
    if ddl.is_mariadb():
        op.execute(
            "ALTER TABLE user_operations"
            " ADD COLUMN IF NOT EXISTS budget_day DATE NULL,"
            " ADD COLUMN IF NOT EXISTS reserved_tokens BIGINT NOT NULL DEFAULT 0"
        )
        return
    with ddl.sqlite_batch_alter_table("user_operations") as batch:
        batch.add_column(sa.Column("budget_day", sa.Date(), nullable=True))
        batch.add_column(
            sa.Column(
                "reserved_tokens", sa.BigInteger(), nullable=False, server_default=sa.text("0")
            )
        )


def downgrade() -> None:
    if ddl.is_mariadb():
        op.execute(
            "ALTER TABLE user_operations"
            " DROP COLUMN IF EXISTS budget_day, DROP COLUMN IF EXISTS reserved_tokens"
        )
    else:
        with ddl.sqlite_batch_alter_table("user_operations") as batch:
            batch.drop_column("reserved_tokens")
            batch.drop_column("budget_day")
    ddl.drop_table("owner_token_budgets")
    ddl.drop_table("token_budget_days")
