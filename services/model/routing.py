"""Which model route an AI operation may use (seed 000, AI-002).

Routing is sequential and local first. A local-route worker calls only the
local model; when that route is down (or its circuit is open) the operation
either moves to ``waiting_for_external_fallback``, where a worker holding the
external route claims it, or fails retryable to be tried locally again later.

The external route is permitted only when all three hold: the owner's privacy
snapshot is ``external_allowed``, the task is on the external allowlist
(``TaskType.external_allowed``), and an external route is configured. Anything
else keeps the user's text on the local model.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from durable_ops.model.states import Privacy


class Route(StrEnum):
    """Route names as stored in the operation's provenance (at most 16 characters)."""

    LOCAL = "local"
    EXTERNAL = "external"


class LocalUnavailableAction(StrEnum):
    """What a local-route worker does with an operation whose local route is down."""

    FALLBACK_TO_EXTERNAL = "fallback_to_external"  # -> waiting_for_external_fallback
    RETRY_LATER = "retry_later"  # fail retryable: local again after the backoff


@dataclass(frozen=True)
class RoutePlan:
    try_local: bool  # the local circuit admits a call now
    external_permitted: bool

    @property
    def on_local_unavailable(self) -> LocalUnavailableAction:
        if self.external_permitted:
            return LocalUnavailableAction.FALLBACK_TO_EXTERNAL
        return LocalUnavailableAction.RETRY_LATER

    @property
    def routes(self) -> tuple[Route, ...]:
        """Routes in the order the operation may use them, across workers."""
        ordered: list[Route] = []
        if self.try_local:
            ordered.append(Route.LOCAL)
        if self.external_permitted:
            ordered.append(Route.EXTERNAL)
        return tuple(ordered)


def external_route_permitted(
    privacy: Privacy, *, task_external_allowed: bool, external_configured: bool
) -> bool:
    return privacy is Privacy.EXTERNAL_ALLOWED and task_external_allowed and external_configured


def route_plan(
    privacy: Privacy,
    *,
    task_external_allowed: bool,
    external_configured: bool,
    local_circuit_allows: bool,
) -> RoutePlan:
    """Plan one attempt.

    ``local_circuit_allows``: whether the local breaker's ``allow(now)`` gave a ticket,
    which in the half-open state it gives one trial call only.
    """
    return RoutePlan(
        try_local=local_circuit_allows,
        external_permitted=external_route_permitted(
            privacy,
            task_external_allowed=task_external_allowed,
            external_configured=external_configured,
        ),
    )
