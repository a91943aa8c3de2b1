"""Core transactions keep the owner scope: the scope supplies the owner, and a
statement that would cross it is refused before it reaches the database."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import cast

import pytest
from sqlalchemy import Table, bindparam, update

from durable_ops.model.errors import NotFound
from durable_ops.storage import operations
from durable_ops.storage.db import Database
from durable_ops.storage.schema import UserOperation
from durable_ops.storage.tx import SCOPE_OWNER, ScopeViolation

NOW = datetime(2026, 11, 30, tzinfo=UTC)
OPS = cast(Table, UserOperation.__table__)
RENAME_OWNED = (
    update(OPS)
    .where(OPS.c.id == bindparam("operation_id"), OPS.c.owner_user_id == SCOPE_OWNER)
    .values(subject_id="renamed")
)


def _create(database: Database, owner: str) -> str:
    request = operations.CreateRequest("report.build", f"k-{owner}", "report", "r1")
    op, _ = database.run(lambda tx: operations.create(tx, request, NOW), owner_id=owner)
    return op.id


def test_an_owner_scope_refuses_a_statement_without_the_owner_filter(database: Database) -> None:
    unfiltered = update(OPS).values(subject_id="everyone's")
    with pytest.raises(ScopeViolation):
        database.run(lambda tx: tx.execute(unfiltered), owner_id="alice")


def test_the_neutral_scope_refuses_a_statement_that_needs_an_owner(database: Database) -> None:
    with pytest.raises(ScopeViolation):
        database.run(lambda tx: tx.execute(RENAME_OWNED, {"operation_id": "x"}), owner_id=None)


def test_the_scope_not_the_caller_supplies_the_owner(database: Database) -> None:
    bobs = _create(database, "bob")
    changed = database.run(
        lambda tx: tx.execute(RENAME_OWNED, {"operation_id": bobs, "scope_owner": "bob"}).rowcount,
        owner_id="alice",
    )
    assert changed == 0
    assert database.run(lambda tx: operations.get(tx, bobs), owner_id="bob").subject_id == "r1"


def test_another_owners_operation_is_not_found_in_every_read(database: Database) -> None:
    alices = _create(database, "alice")
    with pytest.raises(NotFound):
        database.run(lambda tx: operations.get(tx, alices), owner_id="bob")
    page = database.run(lambda tx: operations.list_page(tx, size=10, token=""), owner_id="bob")
    assert page.items == []
    found = database.run(
        lambda tx: operations.latest_for_subject(tx, "report.build", "report", "r1"),
        owner_id="bob",
    )
    assert found is None


def test_claims_and_creates_run_only_in_their_own_scope(database: Database) -> None:
    request = operations.CreateRequest("report.build", "k", "report", "r1")
    with pytest.raises(ScopeViolation):
        database.run(lambda tx: operations.create(tx, request, NOW), owner_id=None)
    with pytest.raises(ScopeViolation):
        database.run(lambda tx: operations.claim(tx, ["report.build"], 30, NOW), owner_id="alice")
