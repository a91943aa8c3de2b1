"""The owner scope of a ``Tx`` holds on every owner-bearing table (workspace,
notifications, sessions, admission's counts included): a statement without the
owner filter is refused, the scope supplies the owner, and only the neutral
scope sees everyone."""

from __future__ import annotations

from datetime import UTC, datetime
from functools import partial
from typing import Any

import pytest
from sqlalchemy import Table, delete, func, insert, select, update

from durable_ops.model.errors import NotFound
from durable_ops.model.states import OperationState
from durable_ops.storage import capacity, notifications, operations, sessions, workspace
from durable_ops.storage.db import Database
from durable_ops.storage.schema import Base
from durable_ops.storage.tx import SCOPE_OWNER, ScopeViolation, Tx
from tests.support.stored import rows, scalar

NOW = datetime(2026, 11, 30, 12, 0, 0, 123456, tzinfo=UTC)
JOBS = workspace.JOBS
OWNED_TABLES = sorted(
    (table for table in Base.metadata.tables.values() if "owner_user_id" in table.c),
    key=lambda table: table.name,
)


def _job(job_id: str) -> dict[str, Any]:
    return {
        "id": job_id,
        "title": "t",
        "company": "c",
        "description": "d",
        "created_at": NOW,
        "updated_at": NOW,
    }


@pytest.fixture
def two_owners(database: Database) -> Database:
    stamped = insert(JOBS).values(owner_user_id=SCOPE_OWNER)
    database.run(lambda tx: tx.execute(stamped, _job("a" * 32)), owner_id="alice")
    database.run(lambda tx: tx.execute(stamped, _job("b" * 32)), owner_id="bob")
    return database


@pytest.mark.parametrize("table", OWNED_TABLES, ids=lambda table: table.name)
def test_an_owner_scope_refuses_any_statement_without_the_owner_filter(
    database: Database, table: Table
) -> None:
    unfiltered = (
        select(table),
        select(func.count()).select_from(table),
        update(table).values(owner_user_id="alice"),
        delete(table),
        insert(table),
    )
    for statement in unfiltered:
        with pytest.raises(ScopeViolation):
            database.run(partial(Tx.execute, statement=statement), owner_id="alice")


def test_another_owners_row_cannot_be_inserted_in_an_owner_scope(two_owners: Database) -> None:
    foreign = {**_job("c" * 32), "owner_user_id": "bob"}
    with pytest.raises(ScopeViolation):  # naming the owner itself is the unfiltered statement
        two_owners.run(lambda tx: tx.execute(insert(JOBS), foreign), owner_id="alice")
    stamped = insert(JOBS).values(owner_user_id=SCOPE_OWNER)
    posing = {**_job("d" * 32), "scope_owner": "bob"}  # the scope, not the caller, says who
    two_owners.run(lambda tx: tx.execute(stamped, posing), owner_id="alice")
    owners = dict(rows(two_owners, select(JOBS.c.id, JOBS.c.owner_user_id)))
    assert owners == {"a" * 32: "alice", "b" * 32: "bob", "d" * 32: "alice"}


def test_the_neutral_scope_refuses_a_statement_that_needs_an_owner(two_owners: Database) -> None:
    with pytest.raises(ScopeViolation):
        two_owners.run(
            lambda tx: workspace.get_job(tx, "a" * 32, lease=None, now=NOW), owner_id=None
        )
    with pytest.raises(ScopeViolation):
        two_owners.run(notifications.unread_count, owner_id=None)


def test_the_workspace_reads_and_writes_only_the_scope_owners_rows(two_owners: Database) -> None:
    page = two_owners.run(lambda tx: workspace.list_jobs(tx, size=10, token=""), owner_id="alice")
    assert [job.id for job in page.items] == ["a" * 32]
    with pytest.raises(NotFound):
        two_owners.run(
            lambda tx: workspace.get_job(tx, "b" * 32, lease=None, now=NOW), owner_id="alice"
        )
    made = two_owners.run(lambda tx: workspace.create_job(tx, "x", "", "y", NOW), owner_id="bob")
    assert made.owner_user_id == "bob"
    stored = scalar(two_owners, select(JOBS.c.owner_user_id).where(JOBS.c.id == made.id))
    assert stored == "bob"


def test_notifications_and_sessions_stay_with_their_owner(database: Database) -> None:
    made = {}
    request = operations.CreateRequest("report.build", "k", "report", "r1")
    for owner in ("alice", "bob"):
        op, _ = database.run(lambda tx: operations.create(tx, request, NOW), owner_id=owner)
        made[owner] = op.id
        database.run(lambda tx: sessions.create_session(tx, NOW, 60), owner_id=owner)
    database.run(
        lambda tx: notifications.insert_for_operations(
            tx, list(made.values()), OperationState.SUCCEEDED, NOW
        ),
        owner_id=None,
    )
    (alices,) = database.run(
        lambda tx: notifications.list_page(tx, size=10, token=""), owner_id="alice"
    ).items
    assert alices.operation_id == made["alice"]
    with pytest.raises(NotFound):
        database.run(lambda tx: notifications.mark_read(tx, alices.id, NOW), owner_id="bob")
    assert database.run(lambda tx: notifications.mark_all_read(tx, NOW), owner_id="alice") == 1
    assert database.run(notifications.unread_count, owner_id="bob") == 1
    assert database.run(lambda tx: sessions.revoke_user(tx, NOW), owner_id="alice") == 1
    assert rows(database, select(sessions.SESSIONS.c.owner_user_id)) == [("bob",)]
    counted = database.run(
        lambda tx: (
            capacity.active_for_owner(tx, ["report.build"]),
            capacity.active_for_everyone(tx, ["report.build"]),  # by design, in an owner scope
        ),
        owner_id="alice",
    )
    assert counted == (1, 2)


def test_times_round_trip_as_utc_with_microseconds(two_owners: Database) -> None:
    job = two_owners.run(
        lambda tx: workspace.get_job(tx, "a" * 32, lease=None, now=NOW), owner_id="alice"
    )
    assert job.created_at == NOW
    assert job.created_at.tzinfo is UTC


def test_neutral_scope_sees_everyone(two_owners: Database) -> None:
    assert scalar(two_owners, select(func.count()).select_from(JOBS)) == 2
    assert scalar(two_owners, select(func.count()).select_from(notifications.NOTIFICATIONS)) == 0


def test_deleting_an_operation_keeps_its_notification_unlinked(database: Database) -> None:
    request = operations.CreateRequest("report.build", "k", "report", "r1")
    op, _ = database.run(lambda tx: operations.create(tx, request, NOW), owner_id="alice")
    database.run(
        lambda tx: notifications.insert_for_operations(tx, [op.id], OperationState.SUCCEEDED, NOW),
        owner_id=None,
    )
    ops = notifications.OPS  # history cleanup is an operator's, unscoped, act
    database.run(lambda tx: tx.execute(delete(ops).where(ops.c.id == op.id)), owner_id=None)
    page = database.run(lambda tx: notifications.list_page(tx, size=10, token=""), owner_id="alice")
    (kept,) = page.items
    assert kept.operation_id is None  # ON DELETE SET NULL, on both engines
    assert kept.title == "Operation is ready"
