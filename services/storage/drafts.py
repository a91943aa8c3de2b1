"""The answer a running attempt has written so far: the owner's content, beside the notes.

One row per operation (``ai_answer_drafts``), never in the operation row. The
beat writer (``operations.leases.extend``) writes it in the transaction of the
beat that carried it, after the beat's guarded UPDATE held the lease: the row
is the lease's own (its token hash), so a new attempt replaces an older
attempt's text instead of appending to it. The operation's end
(``operations.apply.write``) deletes it; retention deletes one left behind.
The owner reads only the draft of the attempt that holds the lease now. A deleted job
or CV takes the drafts of the operations that read it along (``forget_reading``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import cast

from sqlalchemy import Table, bindparam, delete, insert, select, update

from durable_ops.model.errors import NotFound
from durable_ops.storage.operations.reads import reading_row
from durable_ops.storage.operations.rows import OPS, OWNED, S
from durable_ops.storage.schema import AnswerDraft
from durable_ops.storage.tx import SCOPE_OWNER, Tx

DRAFTS = cast(Table, AnswerDraft.__table__)
STALE_AFTER = timedelta(days=1)  # no beat wrote it for this long: its attempt is long gone
DRAFT_NOT_FOUND = "draft_not_found"


@dataclass(frozen=True)
class Text:
    """One lease's beat text: the lease holds (the beat's guarded UPDATE matched it)."""

    operation_id: str
    owner_id: str
    token_hash: str
    text: str


@dataclass(frozen=True)
class Draft:
    operation_id: str
    attempt: int
    text: str
    updated_at: datetime


_OWN = (DRAFTS.c.operation_id == bindparam("operation")) & (
    DRAFTS.c.owner_user_id == bindparam("owner")
)
_REWRITE = (
    update(DRAFTS)
    .where(_OWN, DRAFTS.c.lease_token_hash == bindparam("token_hash"))
    .values(body=bindparam("text"), updated_at=bindparam("now"))
)
_FORGET_OLDER = delete(DRAFTS).where(_OWN)
# The attempt number comes from the operation row the beat has just extended (and locked).
_START = insert(DRAFTS).from_select(
    ["operation_id", "owner_user_id", "attempt", "lease_token_hash", "body", "updated_at"],
    select(
        OPS.c.id,
        OPS.c.owner_user_id,
        OPS.c.attempt,
        OPS.c.lease_token_hash,
        bindparam("text", type_=DRAFTS.c.body.type),
        bindparam("now", type_=DRAFTS.c.updated_at.type),
    ).where(
        OPS.c.id == bindparam("operation"),
        OPS.c.owner_user_id == bindparam("owner"),
        OPS.c.lease_token_hash == bindparam("token_hash"),
    ),
)
_DISCARD = delete(DRAFTS).where(DRAFTS.c.operation_id.in_(bindparam("ids", expanding=True)))
_CURRENT = (
    select(
        DRAFTS.c.operation_id, DRAFTS.c.attempt, DRAFTS.c.body.label("text"), DRAFTS.c.updated_at
    )
    .join(OPS, OPS.c.id == DRAFTS.c.operation_id)
    .where(
        DRAFTS.c.operation_id.in_(bindparam("ids", expanding=True)),
        OWNED,
        DRAFTS.c.owner_user_id == OPS.c.owner_user_id,
        OPS.c.state == S.RUNNING,
        OPS.c.lease_token_hash == DRAFTS.c.lease_token_hash,
    )
)
# Driven from the drafts, a small table (one row per running attempt, and the few left
# behind): the owner's operation history is never scanned for a second reference.
_OF_READERS = (
    select(DRAFTS.c.operation_id)
    .join(OPS, OPS.c.id == DRAFTS.c.operation_id)
    .where(DRAFTS.c.owner_user_id == SCOPE_OWNER, reading_row())
)
_FORGET = delete(DRAFTS).where(
    DRAFTS.c.owner_user_id == SCOPE_OWNER,
    DRAFTS.c.operation_id.in_(bindparam("ids", expanding=True)),
)
_STALE = delete(DRAFTS).where(DRAFTS.c.updated_at < bindparam("stale_before"))


def write(tx: Tx, texts: Sequence[Text], now: datetime) -> None:
    """Each held lease's text as its attempt's draft (neutral scope: each row binds its owner).

    The common beat rewrites the attempt's own row; the first text of an
    attempt drops whatever an older attempt left and starts the row afresh.
    """
    for text in texts:
        parameters = {
            "operation": text.operation_id,
            "owner": text.owner_id,
            "token_hash": text.token_hash,
            "text": text.text,
            "now": now,
        }
        if tx.write(_REWRITE, parameters) == 0:
            tx.write(_FORGET_OLDER, parameters)
            tx.write(_START, parameters)


def discard(tx: Tx, operation_ids: Sequence[str]) -> None:
    """The operations ended: their drafts go (the validated note is the result)."""
    if operation_ids:
        tx.across_owners().execute(_DISCARD, {"ids": list(operation_ids)})


def forget_reading(tx: Tx, row_type: str, row_id: str) -> int:
    """The scope owner's drafts of the operations that read one workspace row (as subject or
    second reference) are deleted with the row: they quote it. How many went."""
    row = {"row_type": row_type, "row_id": row_id}
    ids = [found.operation_id for found in tx.execute(_OF_READERS, row)]
    return tx.execute(_FORGET, {"ids": ids}).rowcount if ids else 0


def current(tx: Tx, operation_ids: Sequence[str]) -> dict[str, Draft]:
    """The scope owner's drafts of these operations, each only while the attempt that wrote
    it still holds the running operation (an older attempt's text is never shown)."""
    if not operation_ids:
        return {}
    rows = tx.execute(_CURRENT, {"ids": list(operation_ids)})
    return {row.operation_id: Draft(**row._mapping) for row in rows}


def get(tx: Tx, operation_id: str) -> Draft:
    """The scope owner's current draft of one operation; NOT_FOUND ``draft_not_found``."""
    found = current(tx, [operation_id]).get(operation_id)
    if found is None:
        raise NotFound("no answer written yet", code=DRAFT_NOT_FOUND)
    return found


def prune_stale(tx: Tx, now: datetime) -> int:
    """Drafts no beat wrote for ``STALE_AFTER`` (their operation ended without its end
    finding them, or waits for a retry that never came): deleted across owners."""
    return tx.across_owners().execute(_STALE, {"stale_before": now - STALE_AFTER}).rowcount
