"""AI admission rules: who may start AI work, whether there is room for it, and when a
reused analysis runs."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from durable_ops.model.errors import CapacityExceeded, PermissionDenied, Unavailable
from durable_ops.model.states import OperationState, Plan, Privacy

RETRY_AFTER_SECONDS = 15


@dataclass(frozen=True)
class Limits:
    per_user: int = 2
    global_: int = 20
    # Tokens all owners together may spend per UTC day; None: no global budget.
    global_daily_tokens: int | None = None


def require_entitled(*, global_enabled: bool, plan: Plan, ai_enabled: bool) -> None:
    """Re-checked on every admission, from live values: a revoked plan refuses at once."""
    if not global_enabled:
        raise Unavailable("AI features are switched off", code="ai_unavailable")
    if plan is not Plan.PRO:
        raise PermissionDenied("AI analyses need the Pro plan", code="not_entitled")
    if not ai_enabled:
        raise PermissionDenied("AI features are off in your settings", code="ai_disabled")


def require_capacity(*, owner_active: int, everyone_active: int, limits: Limits) -> None:
    if owner_active >= limits.per_user:
        raise CapacityExceeded(
            f"at most {limits.per_user} AI analyses may be queued or running at once per user",
            retry_after_seconds=RETRY_AFTER_SECONDS,
        )
    if everyone_active >= limits.global_:
        raise CapacityExceeded(
            "AI capacity is fully used right now", retry_after_seconds=RETRY_AFTER_SECONDS
        )


def effective_privacy(snapshot: Privacy, current: Privacy) -> Privacy:
    """The stricter of the admission snapshot and the owner's setting now."""
    if Privacy.LOCAL_ONLY in (snapshot, current):
        return Privacy.LOCAL_ONLY
    return Privacy.EXTERNAL_ALLOWED


def due_at(asked: datetime | None, now: datetime) -> datetime:
    """When an analysis asked at ``now`` to run not before ``asked`` is due: ``asked``, or
    ``now`` when it names no time or one already past (as ``bounds.not_before`` stores it)."""
    return now if asked is None else max(asked, now)


def waits_until(state: str, not_before: datetime, now: datetime) -> datetime | None:
    """The later time a queued operation waits for; None when it is due now (or no longer
    queued: running, waiting for a retry, ended)."""
    return not_before if state == OperationState.QUEUED and not_before > now else None
