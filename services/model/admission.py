"""AI admission rules: who may start AI work, and whether there is room for it."""

from __future__ import annotations

from dataclasses import dataclass

from durable_ops.model.errors import CapacityExceeded, PermissionDenied, Unavailable
from durable_ops.model.states import Plan, Privacy

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
            f"at most {limits.per_user} AI analyses may run at once per user",
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
