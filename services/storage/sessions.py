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

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from durable_ops.model.errors import InvalidArgument, Unauthenticated
from durable_ops.storage.schema import UserSession, UserTokenFloor
from durable_ops.storage.tx import Tx

SESSION_ID_BYTES = 32
SESSION_ID_MAX = 64  # token_urlsafe(32) is 43 characters; a longer value is no id of ours
SESSION_MAX_SECONDS = 7 * 24 * 3600
PRUNE_BATCH = 100
SESSION_ENDED = "session_ended"
REVOKED = "token_revoked"


def session_key(session_id: str) -> str:
    """What is stored of a session id: its SHA-256, hex."""
    return hashlib.sha256(session_id.encode()).hexdigest()


def _owner(session: Session) -> str:
    owner = Tx.of(session).owner_id
    if owner is None:
        raise ValueError("sessions are made and revoked in their owner's scope")
    return owner


def _refuse_revoked(session: Session, issued_at: datetime) -> None:
    floor = session.get(UserTokenFloor, _owner(session))
    if floor is not None and issued_at < floor.not_before:
        raise Unauthenticated("this token was revoked; sign in again", code=REVOKED)


def create_session(
    session: Session, now: datetime, ttl_seconds: int, *, token_issued_at: datetime | None = None
) -> tuple[str, UserSession]:
    """A new session of the scope's owner for ``ttl_seconds``; its id is returned only here.

    ``token_issued_at``: the ``iat`` of the token signed in with; a token the
    owner's revocation came after makes no session.
    """
    if not 1 <= ttl_seconds <= SESSION_MAX_SECONDS:
        raise InvalidArgument("ttl_seconds", f"must be between 1 and {SESSION_MAX_SECONDS}")
    if token_issued_at is not None:
        _refuse_revoked(session, token_issued_at)
    _prune_expired(session, now)
    session_id = secrets.token_urlsafe(SESSION_ID_BYTES)
    row = UserSession(
        id=session_key(session_id),
        created_at=now,
        expires_at=now + timedelta(seconds=ttl_seconds),
    )
    session.add(row)
    session.flush()
    return session_id, row


def _prune_expired(session: Session, now: datetime) -> None:
    """Delete up to ``PRUNE_BATCH`` expired sessions of any owner, oldest first.

    Core statements on the transaction's connection, which the owner filter of
    ORM queries does not reach: pruning reads nobody's data, and deletes by key.
    """
    connection = session.connection()
    keys = connection.scalars(
        select(UserSession.id)
        .where(UserSession.expires_at <= now)
        .order_by(UserSession.expires_at)
        .limit(PRUNE_BATCH)
    ).all()
    if keys:
        connection.execute(delete(UserSession).where(UserSession.id.in_(keys)))


def _ended() -> Unauthenticated:
    return Unauthenticated("the session is unknown, expired or ended", code=SESSION_ENDED)


def resolve_session(session: Session, session_id: str, now: datetime) -> str:
    """The owner of a live session (neutral scope: the owner is what is asked).

    One primary-key read; an unknown, expired or deleted session is
    ``Unauthenticated`` ``session_ended``, the same for each so nothing tells them apart.
    """
    if not 0 < len(session_id) <= SESSION_ID_MAX:
        raise _ended()
    row = session.get(UserSession, session_key(session_id))
    if row is None or row.expires_at <= now:
        raise _ended()
    return row.owner_user_id


def check_token(session: Session, issued_at: datetime) -> None:
    """Refuse (``token_revoked``) a token of the scope's owner issued before their revocation.

    One primary-key read. ``iat`` has whole seconds: a token minted in the
    second of a revocation counts as before it.
    """
    _refuse_revoked(session, issued_at)


def delete_session(session: Session, session_id: str) -> bool:
    """End a session by its id (logout); whether there was one."""
    if not 0 < len(session_id) <= SESSION_ID_MAX:
        return False
    row = session.get(UserSession, session_key(session_id))
    if row is None:
        return False
    session.delete(row)
    session.flush()
    return True


def revoke_user(session: Session, now: datetime) -> int:
    """End every session of the scope's owner and refuse their tokens issued before ``now``.

    Returns the number of sessions ended.
    """
    owner = _owner(session)
    # On the connection, which the ORM owner filter does not reach: the owner is named here.
    ended = (
        session.connection()
        .execute(delete(UserSession).where(UserSession.owner_user_id == owner))
        .rowcount
    )
    floor = session.get(UserTokenFloor, owner)
    if floor is None:
        session.add(UserTokenFloor(owner_user_id=owner, not_before=now))
    else:
        floor.not_before = max(floor.not_before, now)
    session.flush()
    return int(ended)
