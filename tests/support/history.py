"""A long history, written fast: many finished operations of one owner in one INSERT.

Each row copies one operation made the ordinary way (``operations.create``), so every
column holds what the storage writes; only the id, key, state, times and outcome differ.
One a minute back from ``newest``, so the list's order (created_at, then id) is known.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import insert, select

from durable_ops.model.states import OperationState
from durable_ops.storage import operations
from durable_ops.storage.db import Database
from durable_ops.storage.notifications import NOTIFICATIONS
from durable_ops.storage.operations.rows import OPS
from durable_ops.storage.tx import Tx

FINISHED = (OperationState.SUCCEEDED, OperationState.FAILED, OperationState.CANCELLED)


def seed_history(
    db: Database,
    owner: str,
    count: int,
    newest: datetime,
    *,
    states: Sequence[OperationState] = FINISHED,
    subject: tuple[str, str] = ("job", "job-1"),
    task_type: str = "strategy.snapshot",
) -> list[str]:
    """``count`` finished operations of ``owner``, the newest at ``newest``, one a minute
    before the other, their states in turn from ``states``: their ids, newest first."""

    def template(tx: Tx) -> dict[str, Any]:
        request = operations.CreateRequest(task_type, f"template-{uuid.uuid4().hex}", *subject)
        created, _ = operations.create(tx, request, newest, fair=False)
        row = tx.connection.execute(select(OPS).where(OPS.c.id == created.id)).one()
        tx.connection.execute(OPS.delete().where(OPS.c.id == created.id))
        return dict(row._mapping)

    model = db.run(template, owner_id=owner)
    rows = []
    for n in range(count):
        created_at = newest - timedelta(minutes=n)
        rows.append(
            {
                **model,
                "id": uuid.uuid4().hex,
                "idempotency_key": f"history-{uuid.uuid4().hex}",
                "state": states[n % len(states)].value,
                "created_at": created_at,
                "updated_at": created_at + timedelta(seconds=30),
                "finished_at": created_at + timedelta(seconds=30),
                "progress_percent": 100,
            }
        )
    with db.engine.begin() as connection:
        for start in range(0, count, 1000):  # a statement's parameters stay in bounds
            connection.execute(insert(OPS), rows[start : start + 1000])
    return [row["id"] for row in rows]


def seed_notifications(
    db: Database,
    owner: str,
    count: int,
    newest: datetime,
    *,
    read: int = 0,
    dismissed: bool = False,
) -> None:
    """``count`` notifications of ``owner`` about no operation, the newest at ``newest``, one
    a minute before the other: the newest ``read`` of them read, all dismissed or none."""
    rows = [
        {
            "id": uuid.uuid4().hex,
            "owner_user_id": owner,
            "operation_id": None,
            "task_type": "strategy.snapshot",
            "outcome": "succeeded",
            "title": f"Strategy snapshot ready ({n})",
            "body": "Open your operations to see it.",
            "created_at": newest - timedelta(minutes=n),
            "read_at": newest if n < read else None,
            "dismissed_at": newest if dismissed else None,
        }
        for n in range(count)
    ]
    with db.engine.begin() as connection:
        for start in range(0, count, 1000):  # a statement's parameters stay in bounds
            connection.execute(insert(NOTIFICATIONS), rows[start : start + 1000])
