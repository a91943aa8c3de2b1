"""Who is calling: the three scopes of SPEC §2 and what each may do."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from durable_ops.model.errors import LEASE_REQUIRED, PermissionDenied
from durable_ops.model.tasks import TASKS


class Role(StrEnum):
    GATEWAY = "gateway"
    WORKER = "worker"
    PRODUCER = "producer"
    OPERATOR = "operator"  # opsctl operations: only ever the operator scope (ADR 19)


@dataclass(frozen=True)
class OwnerScope:
    """A valid service credential plus ``x-owner-id``: every query is filtered by owner."""

    role: Role
    owner_id: str


@dataclass(frozen=True)
class NeutralScope:
    """A worker credential without ``x-owner-id``: only claims and the sweeper run here."""

    role: Role = Role.WORKER


@dataclass(frozen=True)
class OperatorScope:
    """An ``operator`` credential without ``x-owner-id``: cross-owner reads, and cancels
    and retries run in the owner's scope of the operation they name (ADR 19)."""

    role: Role = Role.OPERATOR


Scope = OwnerScope | NeutralScope | OperatorScope


def require_owner(scope: Scope) -> OwnerScope:
    if not isinstance(scope, OwnerScope):
        raise PermissionDenied(
            "this call needs an owner scope (x-owner-id)", code="owner_scope_required"
        )
    return scope


def require_neutral_worker(scope: Scope) -> NeutralScope:
    if not isinstance(scope, NeutralScope) or scope.role is not Role.WORKER:
        raise PermissionDenied(
            "claims run only in the neutral worker scope", code="neutral_scope_required"
        )
    return scope


def require_worker_owner(scope: Scope) -> OwnerScope:
    """Lease mutations: a worker re-entering the owner scope it claimed for."""
    owner = require_owner(scope)
    if owner.role is not Role.WORKER:
        raise PermissionDenied(
            "lease mutations need a worker credential", code="worker_role_required"
        )
    return owner


def require_operation_changer(scope: Scope) -> OwnerScope:
    """Creating, cancelling, retrying or deleting an owner's operation: the gateway for the
    user, or a producer. A worker changes only the operations it holds, with their lease
    tokens (``require_worker_owner``)."""
    owner = require_owner(scope)
    if owner.role not in (Role.GATEWAY, Role.PRODUCER):
        raise PermissionDenied(
            "a worker changes only the operations it holds, with their lease tokens",
            code="worker_role_refused",
        )
    return owner


def require_admission_for_analyses(owner: OwnerScope, task_type: str) -> None:
    """An analysis (a task type of the registry) starts and runs again only through AI
    admission, which checks the owner's plan, daily token budget and capacity: the gateway
    sends it there, while a producer's key, which admission never sees, would spend the
    owner's tokens past all three."""
    if owner.role is Role.PRODUCER and task_type in TASKS:
        raise PermissionDenied(
            "an analysis starts only through AI admission (the owner's plan, budget and capacity)",
            code="admission_required",
        )


def require_user_for_analyses(owner: OwnerScope, task_type: str) -> None:
    """An analysis is cancelled or deleted only by its user, through the gateway: a
    producer's key, which starts none (``require_admission_for_analyses``), ends none."""
    if owner.role is Role.PRODUCER and task_type in TASKS:
        raise PermissionDenied(
            "an analysis is cancelled or deleted only by its user, through the gateway",
            code="analysis_of_a_user",
        )


def require_user_agent(scope: Scope) -> OwnerScope:
    """What only a signed-in user does, through the gateway: their jobs, CVs, settings,
    results, notifications and admissions. Workers and producers act on operations only."""
    owner = require_owner(scope)
    if owner.role is not Role.GATEWAY:
        raise PermissionDenied(
            f"the {owner.role.value} role acts on operations, not on a user's workspace",
            code="gateway_scope_required",
        )
    return owner


@dataclass(frozen=True)
class ReadLease:
    """The operation a worker reads for and that operation's lease token (ADR 62): empty
    from the gateway."""

    operation_id: str
    token: str


@dataclass(frozen=True)
class SubjectReader:
    """Who reads a subject or the owner's AI settings, and under which lease: ``None`` for
    the gateway, which reads any of its user's."""

    owner_id: str
    lease: ReadLease | None


def require_subject_reader(scope: Scope, lease: ReadLease) -> SubjectReader:
    """Reading a subject and the owner's AI settings: the gateway for the user, or the
    worker running an operation about it, under that operation's lease. The storage
    layer checks the lease is live and the subject is the operation's own
    (``storage.workspace``), so a worker key reads only what it holds leases on, never
    any owner's CVs (ADR 62)."""
    owner = require_owner(scope)
    if owner.role is Role.GATEWAY:
        return SubjectReader(owner.owner_id, None)
    if owner.role is not Role.WORKER:
        raise PermissionDenied(
            f"the {owner.role.value} role reads no subjects", code="gateway_scope_required"
        )
    if not lease.operation_id or not lease.token:
        raise PermissionDenied(
            "a worker reads only for an operation it runs: name it and its lease token",
            code=LEASE_REQUIRED,
        )
    return SubjectReader(owner.owner_id, lease)


def require_gateway_owner(scope: Scope) -> OwnerScope:
    """Creating a user's session: the gateway, for the user it signed in. The session id
    is a cookie that signs its holder in as that user, so no other role makes one."""
    owner = require_owner(scope)
    if owner.role is not Role.GATEWAY:
        raise PermissionDenied("sessions are made by the gateway", code="gateway_scope_required")
    return owner


def require_operator(scope: Scope) -> OperatorScope:
    """The operator service: nothing but an operator credential without ``x-owner-id``."""
    if not isinstance(scope, OperatorScope) or scope.role is not Role.OPERATOR:
        raise PermissionDenied("this call needs the operator scope", code="operator_scope_required")
    return scope
