"""Analyses admitted before ``0013_token_budgets`` are charged when they end.

``0013`` gave every existing operation ``budget_day`` NULL: "admission reserved nothing
for it", and the settlement charges nothing for such an operation. An analysis left
under way by a release before ``0013`` (queued, running, waiting for its retry or for
its external fallback) then ran after the upgrade uncharged, to its owner's daily
budget and to the global one. Each gets the day of this upgrade (UTC) with nothing
reserved: what its attempts use from now on is spent on that day, as for any other.
Operations already ended keep NULL: they are history, and what they used was never
counted.

The task types are this revision's AI analyses, written out: the registry may grow.

Galera-safe: one UPDATE of the unfinished analyses, idempotent (it sets only NULLs),
replicated as a row change.

Revision ID: 0024_charge_work_before_budgets
Revises: 0023_results_by_context
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0024_charge_work_before_budgets"
down_revision = "0023_results_by_context"
branch_labels = None
depends_on = None

BACKFILL = sa.text(
    "UPDATE user_operations SET budget_day = :today"
    " WHERE budget_day IS NULL"
    " AND state IN ('queued', 'running', 'waiting_for_retry', 'waiting_for_external_fallback')"
    " AND task_type IN ('strategy.snapshot', 'cv.review')"
).bindparams(sa.bindparam("today", type_=sa.Date()))


def upgrade() -> None:
    op.execute(BACKFILL.bindparams(today=datetime.now(UTC).date()))


def downgrade() -> None:
    # Nothing to undo: a day on an unfinished analysis is what 0013's own downgrade drops,
    # and below this revision it only means that the analysis is charged when it ends.
    pass
