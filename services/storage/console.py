"""All SQL of the operator console's sign-ins (ADR 0045).

A link or a session id is 256 random bits handed out once and stored only as
its SHA-256 (``OperatorConsoleSession.id``). Making a link takes the
``OperatorTx`` (only the operator's own key reaches it); opening a link,
resolving a session and ending one run in the neutral scope, where the gateway
asks with the secret it was handed and learns the operator's name. Opening
deletes the link in the same transaction that stores the session, guarded on
its row count, so two openings of one link make one session. Each new link
prunes expired rows (``sessions.prune_expired``), so they never outgrow the
sign-ins that made them.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import cast

from sqlalchemy import Table, bindparam, delete, insert, select

from durable_ops.model import console
from durable_ops.model.console import Kind
from durable_ops.model.operator import operator_name
from durable_ops.storage.schema import OperatorConsoleSession
from durable_ops.storage.sessions import prune_expired, session_key
from durable_ops.storage.tx import OperatorTx, ScopeViolation, Tx

ROWS = cast(Table, OperatorConsoleSession.__table__)
_BY_KEY = (ROWS.c.id == bindparam("key")) & (ROWS.c.kind == bindparam("kind"))
_READ = select(ROWS.c.operator, ROWS.c.expires_at).where(_BY_KEY)
_DELETE = delete(ROWS).where(_BY_KEY)
_INSERT = insert(ROWS)
_DELETE_OPERATORS = delete(ROWS).where(ROWS.c.operator == bindparam("operator"))
_DELETE_ALL = delete(ROWS)


@dataclass(frozen=True)
class Signed:
    """A live sign-in: who, and until when. ``secret`` is set only where it was made."""

    operator: str
    expires_at: datetime
    secret: str = ""


def _neutral(tx: Tx) -> Tx:
    if tx.owner_id is not None:
        raise ScopeViolation("console sign-ins belong to no owner")
    return tx


def _key(kind: Kind, secret: str) -> dict[str, str]:
    return {"key": session_key(secret), "kind": kind.value}


def _store(tx: Tx, kind: Kind, operator: str, now: datetime) -> Signed:
    secret = secrets.token_urlsafe(console.SECRET_BYTES)
    expires_at = console.expires(kind, now)
    tx.execute(
        _INSERT,
        {
            "id": session_key(secret),
            "kind": kind.value,
            "operator": operator,
            "created_at": now,
            "expires_at": expires_at,
        },
    )
    return Signed(operator, expires_at, secret)


def create_link(tx: OperatorTx, operator: str, now: datetime) -> Signed:
    """A one-time sign-in link for ``operator`` (the operator's key's caller only)."""
    if not isinstance(tx, OperatorTx):
        raise ScopeViolation("console links are made in the operator scope")
    prune_expired(tx, ROWS, now)
    return _store(tx, Kind.LINK, operator_name(operator), now)


def _live(tx: Tx, kind: Kind, secret: str, now: datetime) -> Signed | None:
    if not console.plausible_secret(secret):
        return None
    row = tx.execute(_READ, _key(kind, secret)).one_or_none()
    if row is None or row.expires_at <= now:
        return None
    return Signed(str(row.operator), row.expires_at)


def open_link(tx: Tx, link: str, now: datetime) -> Signed:
    """Spend ``link`` on a new console session; ``Unauthenticated`` for a used,
    expired or unknown one (the same answer for each)."""
    tx = _neutral(tx)
    found = _live(tx, Kind.LINK, link, now)
    # The delete decides: of two openings racing on one link, one deletes it.
    if found is None or tx.execute(_DELETE, _key(Kind.LINK, link)).rowcount != 1:
        raise console.link_unusable()
    return _store(tx, Kind.SESSION, found.operator, now)


def resolve(tx: Tx, session_id: str, now: datetime) -> Signed:
    """The operator of a live console session; one primary-key read."""
    found = _live(_neutral(tx), Kind.SESSION, session_id, now)
    if found is None:
        raise console.session_ended()
    return found


def end(tx: Tx, session_id: str) -> bool:
    """Sign out: delete the session (already gone is fine); whether there was one."""
    if not console.plausible_secret(session_id):
        return False
    return _neutral(tx).execute(_DELETE, _key(Kind.SESSION, session_id)).rowcount > 0


def end_operator(tx: OperatorTx, operator: str | None) -> int:
    """End every link and session of ``operator``, or of everyone for ``None``
    (``opsctl console revoke``); how many."""
    if not isinstance(tx, OperatorTx):
        raise ScopeViolation("an operator's sign-ins are ended in the operator scope")
    if operator is None:
        return int(tx.execute(_DELETE_ALL).rowcount)
    return int(tx.execute(_DELETE_OPERATORS, {"operator": operator_name(operator)}).rowcount)
