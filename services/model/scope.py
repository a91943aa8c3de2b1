"""Who is calling: the two scopes of SPEC §2 and what each may do."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from durable_ops.model.errors import PermissionDenied


class Role(StrEnum):
    GATEWAY = "gateway"
    WORKER = "worker"
    PRODUCER = "producer"


@dataclass(frozen=True)
class OwnerScope:
    """A valid service credential plus ``x-owner-id``: every query is filtered by owner."""

    role: Role
    owner_id: str


@dataclass(frozen=True)
class NeutralScope:
    """A worker credential without ``x-owner-id``: only claims and the sweeper run here."""

    role: Role = Role.WORKER


Scope = OwnerScope | NeutralScope


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
