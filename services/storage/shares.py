"""Owners' shares of the claim's turns on the database (issue 37 point 1, ADR 0049).

``owner_shares`` holds an operator's weight for one owner (``opsctl users set-share``)
and who set it; no row is weight 1. A create reads it with its turn (``creation``).
"""

from __future__ import annotations

from datetime import datetime
from typing import cast

from sqlalchemy import Table, delete, insert, select

from durable_ops.model import fairness
from durable_ops.storage.schema import OwnerShare
from durable_ops.storage.tx import SCOPE_OWNER, Tx

SHARES = cast(Table, OwnerShare.__table__)
_CLEAR = delete(SHARES).where(SHARES.c.owner_user_id == SCOPE_OWNER)
_SET = insert(SHARES).values(owner_user_id=SCOPE_OWNER)  # the other columns: the parameters
_READ = select(SHARES.c.weight).where(SHARES.c.owner_user_id == SCOPE_OWNER)


def set_weight(tx: Tx, weight: int | None, *, set_by: str, now: datetime) -> None:
    """Set the scope owner's weight, or (None) give it back the default."""
    tx.write(_CLEAR, {})
    if weight is not None:
        fairness.weight(weight)
        tx.write(_SET, {"weight": weight, "set_by": set_by, "updated_at": now})


def weight_of(tx: Tx) -> int:
    """The scope owner's weight (the default without a row)."""
    return fairness.weight(tx.execute(_READ).scalar())
