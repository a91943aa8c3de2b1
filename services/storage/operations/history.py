"""The attempt history: a claim starts an attempt row, a decided transition ends it.

Each attempt is keyed by its lease (``rows.attempt_id``), so the transition
that ends a lease finds its attempt by primary key. An attempt row that is
missing (claimed by an older release) is not an error: the end changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import Update, bindparam, insert, update

from durable_ops.storage.operations.rows import ATTEMPTS, batches, numbered
from durable_ops.storage.per_row import per_row, row_ids
from durable_ops.storage.tx import Tx

# The attempt rows of a claim, one multi-row INSERT of the columns each start names.
STARTS = insert(ATTEMPTS)
ENDING = (
    "outcome",
    "failure_code",
    "failure_message",
    "provider",
    "model",
    "lease_expires_at",
    # What the settlement reported its model calls used (None: nothing reported).
    "prompt_tokens",
    "completion_tokens",
    "model_ms",
)


@cache
def _ends(count: int) -> Update:
    ids = row_ids("attempt_id", count)
    return (
        update(ATTEMPTS)
        .where(ATTEMPTS.c.id.in_(ids), ATTEMPTS.c.ended_at.is_(None))
        .values(
            ended_at=bindparam("now"),
            **{name: per_row(ATTEMPTS.c.id, ids, name, ATTEMPTS.c[name].type) for name in ENDING},
        )
    )


def start(tx: Tx, rows: Sequence[dict[str, Any]]) -> None:
    """The attempt rows of a claim's leases, in one multi-row INSERT (neutral scope)."""
    tx.execute_many(STARTS, rows)


def end(tx: Tx, endings: Sequence[dict[str, Any]], now: datetime) -> None:
    """How each attempt ended (``attempt_id`` and the ``ENDING`` columns), one UPDATE per
    ``ROWS_MAX`` attempts (neutral scope)."""
    for part in batches(endings):
        tx.write(_ends(len(part)), numbered(part, now=now))
