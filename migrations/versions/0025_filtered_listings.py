"""An owner's list of one state or one task type, and of the notifications not
dismissed, without reading the owner's history.

- ``ix_user_operations_owner_state_listing (owner_user_id, state, created_at, id)``:
  ``GET /api/operations?state=…``, which the operations page reads again every two
  seconds while it shows a filter. Through ``ix_user_operations_owner_listing`` a page
  of a state the owner has few of (running, queued, failed) walked every operation the
  owner ever made; through ``ix_user_operations_owner_state`` it sorted every one of the
  state.
- ``ix_user_operations_owner_type_listing (owner_user_id, task_type, created_at, id)``:
  ``GET /api/operations?task_type=…``, the same for a task type (a client that lists its
  own kind of work among the owner's others).
- ``ix_user_notifications_owner_shown (owner_user_id, dismissed_at, created_at, id)``:
  the notification list leaves out the dismissed ones; through
  ``ix_user_notifications_owner_listing`` it walked every dismissed notification newer
  than the page it answered.

Galera-safe: three indexes, each idempotent, replicated in total order (TOI).

Frozen: the DDL below is this revision's, written out per dialect.

Revision ID: 0025_filtered_listings
Revises: 0024_charge_work_before_budgets
"""

from __future__ import annotations

from durable_ops.migrations import ddl

revision = "0025_filtered_listings"
down_revision = "0024_charge_work_before_budgets"
branch_labels = None
depends_on = None

OPERATIONS_INDEX = "ix_user_operations_owner_state_listing"
TYPE_INDEX = "ix_user_operations_owner_type_listing"
NOTIFICATIONS_INDEX = "ix_user_notifications_owner_shown"


def upgrade() -> None:
    ddl.create_index(
        OPERATIONS_INDEX, "user_operations", ["owner_user_id", "state", "created_at", "id"]
    )
    ddl.create_index(
        TYPE_INDEX, "user_operations", ["owner_user_id", "task_type", "created_at", "id"]
    )
    ddl.create_index(
        NOTIFICATIONS_INDEX,
        "user_notifications",
        ["owner_user_id", "dismissed_at", "created_at", "id"],
    )


def downgrade() -> None:
    ddl.drop_index(NOTIFICATIONS_INDEX, "user_notifications")
    ddl.drop_index(TYPE_INDEX, "user_operations")
    ddl.drop_index(OPERATIONS_INDEX, "user_operations")
