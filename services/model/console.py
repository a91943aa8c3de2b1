"""The operator console's sign-in (ADR 0045): one-time links, sessions that end. Pure.

``opsctl console link`` (the operator's own key) makes a sign-in link that
works once and for ``LINK_SECONDS``; opening it in the gateway makes a
console session of ``SESSION_SECONDS`` (a working day: long enough for a
shift, short enough that a forgotten browser signs itself out). The gateway
acts in the operator scope only with such a session, and only for
``CONSOLE_CALLS``: pruning and making links stay with the operator's key.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum

from durable_ops.model.errors import InvalidArgument, PermissionDenied, Unauthenticated

# How long a printed sign-in link may wait to be opened: the operator opens it at once.
LINK_SECONDS = 10 * 60
# How long a console session lasts from its sign-in, whatever is done in it.
SESSION_SECONDS = 8 * 3600
SECRET_BYTES = 32  # of a link or a session id: 256 random bits
SECRET_MAX = 64  # token_urlsafe(32) is 43 characters; a longer value is none of ours
# Operations one bulk cancel or retry may name: a page of the console's list.
BULK_MAX = 100
SESSION_ENDED = "console_session_ended"
# The operator service's calls a console session may make, through the gateway: reads,
# the owner's own cancel and retry. Not prune, not links, not ending others' sessions.
CONSOLE_CALLS = frozenset(
    {
        "ListOperations",
        "GetOperation",
        "CancelOperation",
        "RetryOperation",
        "GetQueueDepths",
        "ListTaskTypes",
    }
)
LINK_UNUSABLE = "console_link_unusable"


class Kind(StrEnum):
    LINK = "link"  # opened once, for a session
    SESSION = "session"  # carried by the console cookie


def expires(kind: Kind, now: datetime) -> datetime:
    return now + timedelta(seconds=LINK_SECONDS if kind is Kind.LINK else SESSION_SECONDS)


def plausible_secret(value: str) -> bool:
    """Worth a key read: a value no longer than any secret made here."""
    return 0 < len(value) <= SECRET_MAX


def session_ended() -> Unauthenticated:
    """One answer for an unknown, expired or ended session: nothing tells them apart."""
    return Unauthenticated("the console session is unknown, expired or ended", code=SESSION_ENDED)


def link_unusable() -> Unauthenticated:
    """One answer for an unknown, expired or already used link."""
    return Unauthenticated(
        "this sign-in link is unknown, expired or already used: make a new one with"
        " `opsctl console link`",
        code=LINK_UNUSABLE,
    )


def require_console_call(method: str) -> None:
    """Refuse a console session a call outside ``CONSOLE_CALLS``."""
    if method not in CONSOLE_CALLS:
        raise PermissionDenied(
            f"{method} needs the operator's own key, not a console session",
            code="operator_scope_required",
        )


def bulk_ids(ids: list[str]) -> list[str]:
    """The operations of one bulk action: 1 to ``BULK_MAX``, each once, in the given order."""
    if not ids:
        raise InvalidArgument("ids", "name at least one operation")
    unique = list(dict.fromkeys(ids))
    if len(unique) > BULK_MAX:
        raise InvalidArgument("ids", f"name at most {BULK_MAX} operations at once")
    return unique
