"""Operation states and the privacy choice snapshotted onto an operation."""

from __future__ import annotations

from enum import StrEnum


class OperationState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    WAITING_FOR_RETRY = "waiting_for_retry"
    WAITING_FOR_EXTERNAL_FALLBACK = "waiting_for_external_fallback"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset(
    {OperationState.SUCCEEDED, OperationState.FAILED, OperationState.CANCELLED}
)
PENDING_STATES = frozenset(
    {
        OperationState.QUEUED,
        OperationState.WAITING_FOR_RETRY,
        OperationState.WAITING_FOR_EXTERNAL_FALLBACK,
    }
)
ACTIVE_STATES = frozenset(PENDING_STATES | {OperationState.RUNNING})


class Privacy(StrEnum):
    LOCAL_ONLY = "local_only"
    EXTERNAL_ALLOWED = "external_allowed"


class Plan(StrEnum):
    FREE = "free"
    PRO = "pro"
