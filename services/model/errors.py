"""The domain error tree, shared by every layer.

Each error carries a stable ``code`` (what clients branch on) and a ``kind``
that the one translation table in ``durable_ops.rpc.errors`` maps to a gRPC status
and the gateway maps on to HTTP:

    DomainError
    ├── InvalidArgument      kind=invalid_argument     (a bound or format broken; names the field;
    │                                                    control_character: a control in text)
    ├── Unauthenticated      kind=unauthenticated
    ├── PermissionDenied     kind=permission_denied    (wrong scope, not entitled, AI off for user,
    │                                                    plan_required: AI switched on on Free)
    ├── NotFound             kind=not_found            (also another owner's row: never leaks)
    ├── Conflict             kind=conflict             (idempotency key reused for another request)
    ├── InvalidTransition    kind=failed_precondition  (the state does not allow the event)
    │   └── InUse                                      (analysis_active: an unfinished operation
    │                                                    reads the row; names it)
    ├── LeaseLost            kind=aborted              (token wrong, lease expired or taken over)
    ├── CapacityExceeded     kind=resource_exhausted   (carries retry_after_seconds)
    └── Unavailable          kind=unavailable          (AI off globally, dependency down)
"""

from __future__ import annotations

from typing import TypeVar


class DomainError(Exception):
    kind = "internal"
    code = "internal"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class InvalidArgument(DomainError):
    kind = "invalid_argument"
    code = "invalid_argument"

    def __init__(self, field: str, reason: str, *, code: str | None = None) -> None:
        super().__init__(f"{field}: {reason}", code=code)
        self.field = field
        self.reason = reason  # the message without the field, for a caller that names it


# The code of an InvalidArgument for a control character in a text field (``bounds.single_line``).
CONTROL_CHARACTER = "control_character"


class Unauthenticated(DomainError):
    kind = "unauthenticated"
    code = "unauthenticated"


class PermissionDenied(DomainError):
    kind = "permission_denied"
    code = "permission_denied"


# The code of a PermissionDenied that refuses switching AI on for an owner on the Free plan.
PLAN_REQUIRED = "plan_required"
# The code of a PermissionDenied that refuses a worker's read naming no operation and lease
# (ADR 62).
LEASE_REQUIRED = "lease_required"


class NotFound(DomainError):
    kind = "not_found"
    code = "not_found"


class Conflict(DomainError):
    kind = "conflict"
    code = "idempotency_conflict"


# The message of every idempotency conflict, whichever part of the request differs.
KEY_USED_FOR_ANOTHER_REQUEST = "This key was used for a different request."


class InvalidTransition(DomainError):
    kind = "failed_precondition"
    code = "invalid_state"


class InUse(InvalidTransition):
    """A row an unfinished operation reads (its subject, or its second reference) cannot be
    deleted until that operation ends: the refusal names the operation, so the caller can
    cancel it and try again."""

    code = "analysis_active"

    def __init__(self, message: str, *, operation_id: str) -> None:
        super().__init__(message)
        self.operation_id = operation_id


class LeaseLost(DomainError):
    kind = "aborted"
    code = "lease_lost"


class UsageCharged(LeaseLost):
    """A settlement of a lost lease whose usage was charged all the same: an outage outlasted
    the lease, but the model calls were made (``storage.operations.late_usage``)."""


# The code of a LeaseLost that refuses a result because the owner cancelled first.
CANCEL_REQUESTED = "cancel_requested"


class CapacityExceeded(DomainError):
    kind = "resource_exhausted"
    code = "capacity_exceeded"

    def __init__(self, message: str, *, retry_after_seconds: int | None) -> None:
        super().__init__(message)
        # Whole seconds until trying again may help (``Retry-After``); None when waiting
        # does not help (a budget smaller than one analysis): no ``Retry-After`` then.
        self.retry_after_seconds = retry_after_seconds


class Unavailable(DomainError):
    kind = "unavailable"
    code = "unavailable"


Answer = TypeVar("Answer")


def refusal_raised(answer: Answer | DomainError) -> Answer:
    """One item's answer of a batch that answers each item alone, its refusal raised."""
    if isinstance(answer, DomainError):
        raise answer
    return answer
