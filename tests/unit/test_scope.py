"""The two scopes of SPEC §2 and what each may do.

* Owner scope = a valid credential plus ``x-owner-id`` (any role).
* Neutral scope = a ``worker`` credential and no ``x-owner-id``: only claims run there.
* Claim from owner scope is refused; lease mutations from neutral scope are refused,
  and they are a worker's business (re-entering the owner scope it claimed for).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Final

import pytest

from durable_ops.model.errors import PermissionDenied
from durable_ops.model.scope import (
    NeutralScope,
    OwnerScope,
    ReadLease,
    Role,
    Scope,
    SubjectReader,
    require_gateway_owner,
    require_neutral_worker,
    require_owner,
    require_subject_reader,
    require_worker_owner,
)

OWNER: Final = "alice"


def refused(code: str, check: Callable[[Scope], object], scope: Scope) -> None:
    with pytest.raises(PermissionDenied) as caught:
        check(scope)
    assert caught.value.code == code
    assert caught.value.kind == "permission_denied"


# --- require_owner ------------------------------------------------------------------------


@pytest.mark.parametrize("role", list(Role))
def test_owner_scope_of_any_role_is_accepted_as_owner(role: Role) -> None:
    scope = OwnerScope(role=role, owner_id=OWNER)
    assert require_owner(scope) is scope
    assert require_owner(scope).owner_id == OWNER


def test_neutral_scope_is_not_an_owner_scope() -> None:
    refused("owner_scope_required", require_owner, NeutralScope())


# --- require_neutral_worker (claims) ------------------------------------------------------


def test_neutral_worker_scope_may_claim() -> None:
    scope = NeutralScope()
    assert scope.role is Role.WORKER
    assert require_neutral_worker(scope) is scope


@pytest.mark.parametrize("role", list(Role))
def test_claim_from_owner_scope_is_refused(role: Role) -> None:
    refused("neutral_scope_required", require_neutral_worker, OwnerScope(role, OWNER))


@pytest.mark.parametrize("role", [Role.GATEWAY, Role.PRODUCER])
def test_neutral_scope_without_a_worker_credential_may_not_claim(role: Role) -> None:
    refused("neutral_scope_required", require_neutral_worker, NeutralScope(role=role))


# --- require_worker_owner (heartbeat / progress / complete / fail) ------------------------


def test_worker_in_owner_scope_may_mutate_its_lease() -> None:
    scope = OwnerScope(Role.WORKER, OWNER)
    assert require_worker_owner(scope) is scope


@pytest.mark.parametrize("role", list(Role))
def test_lease_mutation_from_neutral_scope_is_refused(role: Role) -> None:
    refused("owner_scope_required", require_worker_owner, NeutralScope(role=role))


@pytest.mark.parametrize("role", [Role.GATEWAY, Role.PRODUCER])
def test_lease_mutation_needs_a_worker_credential(role: Role) -> None:
    refused("worker_role_required", require_worker_owner, OwnerScope(role, OWNER))


# --- require_subject_reader (a job, a CV, the AI settings; ADR 62) ---------------------------

LEASE: Final = ReadLease("op-1", "token-1")
NO_LEASE: Final = ReadLease("", "")


def test_the_gateway_reads_its_users_subjects_without_a_lease() -> None:
    for lease in (NO_LEASE, LEASE):  # whatever it sends: the gateway holds no lease
        reader = require_subject_reader(OwnerScope(Role.GATEWAY, OWNER), lease)
        assert reader == SubjectReader(OWNER, None)


def test_a_worker_reads_only_under_the_lease_it_names() -> None:
    worker = OwnerScope(Role.WORKER, OWNER)
    assert require_subject_reader(worker, LEASE) == SubjectReader(OWNER, LEASE)
    for lease in (NO_LEASE, ReadLease("op-1", ""), ReadLease("", "token-1")):
        refused("lease_required", partial(require_subject_reader, lease=lease), worker)


@pytest.mark.parametrize("role", [Role.PRODUCER, Role.OPERATOR])
def test_other_roles_read_no_subject_even_with_a_lease(role: Role) -> None:
    read = partial(require_subject_reader, lease=LEASE)
    refused("gateway_scope_required", read, OwnerScope(role, OWNER))
    refused("owner_scope_required", read, NeutralScope())


# --- require_gateway_owner (a user's session) -----------------------------------------------


def test_only_the_gateway_in_owner_scope_makes_a_session() -> None:
    scope = OwnerScope(Role.GATEWAY, OWNER)
    assert require_gateway_owner(scope) is scope
    for role in (Role.WORKER, Role.PRODUCER):
        refused("gateway_scope_required", require_gateway_owner, OwnerScope(role, OWNER))
    refused("owner_scope_required", require_gateway_owner, NeutralScope())


def test_scope_checks_do_not_depend_on_which_owner() -> None:
    for owner in ("alice", "bob"):
        scope = OwnerScope(Role.WORKER, owner)
        assert require_owner(scope).owner_id == owner
        assert require_worker_owner(scope).owner_id == owner
