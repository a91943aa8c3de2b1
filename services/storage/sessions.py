"""All SQL of sign-in sessions and of revoked user tokens (issue 35, point 5).

A session id is 256 random bits (``secrets.token_urlsafe``), handed to the
browser once and stored only as its SHA-256 (``UserSession.id``). Resolving a
cookie and checking a token's ``iat`` against the user's floor are each one
primary-key read. Expired sessions are pruned at sign-in: each new session
deletes up to ``PRUNE_BATCH`` expired ones, so they never outgrow the sign-ins
that made them (the Operations pruner runs only when retention is configured;
sessions must end whatever the retention).
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta
from functools import cache
from typing import Any, cast

from sqlalchemy import Delete, Select, Table, bindparam, delete, insert, select, update

from durable_ops.model.errors import InvalidArgument, Unauthenticated
from durable_ops.storage.schema import UserSession, UserTokenFloor
from durable_ops.storage.tx import SCOPE_OWNER, Tx

SESSION_ID_BYTES = 32
SESSION_ID_MAX = 64  # token_urlsafe(32) is 43 characters; a longer value is no id of ours
SESSION_MAX_SECONDS = 7 * 24 * 3600
PRUNE_BATCH = 100
SESSION_ENDED = "session_ended"
REVOKED = "token_revoked"
SESSIONS = cast(Table, UserSession.__table__)
FLOORS = cast(Table, UserTokenFloor.__table__)
_FLOOR = select(FLOORS.c.not_before).where(FLOORS.c.owner_user_id == SCOPE_OWNER)
_INSERT_FLOOR = insert(FLOORS).values(owner_user_id=SCOPE_OWNER)
_RAISE_FLOOR = update(FLOORS).where(FLOORS.c.owner_user_id == SCOPE_OWNER)
_INSERT_SESSION = insert(SESSIONS).values(owner_user_id=SCOPE_OWNER)
_BY_KEY = SESSIONS.c.id == bindparam("key")
_SESSION = select(SESSIONS.c.owner_user_id, SESSIONS.c.expires_at).where(_BY_KEY)
_DELETE_SESSION = delete(SESSIONS).where(_BY_KEY)
_DELETE_OWNERS_SESSIONS = delete(SESSIONS).where(SESSIONS.c.owner_user_id == SCOPE_OWNER)


def session_key(secret: str) -> str:
    """What is stored of a session id or a console sign-in (``storage.console``): its
    SHA-256, hex."""
    return hashlib.sha256(secret.encode()).hexdigest()


@cache  # one pair of statements per table: Tx checks a statement's scope once
def _expiry(table: Table) -> tuple[Select[Any], Delete]:
    expired = (
        select(table.c.id)
        .where(table.c.expires_at <= bindparam("now"))
        .order_by(table.c.expires_at)
        .limit(PRUNE_BATCH)
    )
    return expired, delete(table).where(table.c.id.in_(bindparam("keys", expanding=True)))


def prune_expired(tx: Tx, table: Table, now: datetime) -> None:
    """Delete up to ``PRUNE_BATCH`` expired rows of ``table`` (sessions, or the console's
    sign-ins), of any owner, oldest first.

    Across owners on purpose: pruning reads nobody's data, and deletes by key.
    """
    expired, deleting = _expiry(table)
    everyone = tx.across_owners()
    keys = everyone.execute(expired, {"now": now}).scalars().all()
    if keys:
        everyone.execute(deleting, {"keys": list(keys)})


def create_session(
    tx: Tx, now: datetime, ttl_seconds: int, *, token_issued_at: datetime | None = None
) -> tuple[str, UserSession]:
    """A new session of the scope's owner for ``ttl_seconds``; its id is returned only here.

    ``token_issued_at``: the ``iat`` of the token signed in with; a token the
    owner's revocation came after makes no session.
    """
    if not 1 <= ttl_seconds <= SESSION_MAX_SECONDS:
        raise InvalidArgument("ttl_seconds", f"must be between 1 and {SESSION_MAX_SECONDS}")
    if token_issued_at is not None:
        check_token(tx, token_issued_at)
    prune_expired(tx, SESSIONS, now)
    session_id = secrets.token_urlsafe(SESSION_ID_BYTES)
    row = UserSession(
        id=session_key(session_id),
        owner_user_id=tx.owner_id,
        created_at=now,
        expires_at=now + timedelta(seconds=ttl_seconds),
    )
    tx.execute(_INSERT_SESSION, {"id": row.id, "created_at": now, "expires_at": row.expires_at})
    return session_id, row


def resolve_session(tx: Tx, session_id: str, now: datetime) -> str:
    """The owner of a live session (neutral scope: the owner is what is asked).

    One primary-key read; an unknown, expired or deleted session is
    ``Unauthenticated`` ``session_ended``, the same for each so nothing tells them apart.
    """
    row = None
    if 0 < len(session_id) <= SESSION_ID_MAX:  # a longer value is no id of ours
        row = tx.execute(_SESSION, {"key": session_key(session_id)}).one_or_none()
    if row is None or row.expires_at <= now:
        raise Unauthenticated("the session is unknown, expired or ended", code=SESSION_ENDED)
    return str(row.owner_user_id)


def check_token(tx: Tx, issued_at: datetime) -> None:
    """Refuse (``token_revoked``) a token of the scope's owner issued before their revocation.

    One primary-key read. ``iat`` has whole seconds: a token minted in the
    second of a revocation counts as before it.
    """
    floor = tx.execute(_FLOOR).scalar()
    if floor is not None and issued_at < floor:
        raise Unauthenticated("this token was revoked; sign in again", code=REVOKED)


def delete_session(tx: Tx, session_id: str) -> bool:
    """End a session by its id (logout, neutral scope); whether there was one."""
    if not 0 < len(session_id) <= SESSION_ID_MAX:
        return False
    return tx.execute(_DELETE_SESSION, {"key": session_key(session_id)}).rowcount > 0


def revoke_user(tx: Tx, now: datetime) -> int:
    """End every session of the scope's owner and refuse their tokens issued before ``now``.

    Returns the number of sessions ended.
    """
    ended = tx.execute(_DELETE_OWNERS_SESSIONS).rowcount
    floor = tx.execute(_FLOOR).scalar()
    if floor is None:
        tx.execute(_INSERT_FLOOR, {"not_before": now})
    elif floor < now:
        tx.execute(_RAISE_FLOOR, {"not_before": now})
    return int(ended)
