"""The owner-scoped session hides other owners' rows even from careless queries."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import delete, func, select, update

from durable_ops.storage.db import Database, OwnerMismatch
from durable_ops.storage.schema import Job, UserNotification

NOW = datetime(2026, 11, 30, 12, 0, 0, 123456, tzinfo=UTC)


def _job(job_id: str, owner: str | None = None) -> Job:
    job = Job(id=job_id, title="t", company="c", description="d", created_at=NOW, updated_at=NOW)
    if owner is not None:
        job.owner_user_id = owner
    return job


@pytest.fixture
def two_owners(database: Database) -> Database:
    with database.owner("alice") as session:
        session.add(_job("a" * 32))
    with database.owner("bob") as session:
        session.add(_job("b" * 32))
    return database


def test_query_without_filter_sees_only_own_rows(two_owners: Database) -> None:
    with two_owners.owner("alice", write=False) as session:
        assert [job.id for job in session.scalars(select(Job))] == ["a" * 32]
        assert session.scalar(select(func.count()).select_from(Job)) == 1
        assert session.get(Job, "b" * 32) is None


def test_updates_and_deletes_cannot_reach_other_owners(two_owners: Database) -> None:
    with two_owners.owner("alice") as session:
        updated = session.execute(update(Job).values(title="mine"))
        deleted = session.execute(delete(Job).where(Job.id == "b" * 32))
        assert updated.rowcount == 1  # type: ignore[attr-defined]
        assert deleted.rowcount == 0  # type: ignore[attr-defined]
    with two_owners.neutral(write=False) as session:
        titles = dict(session.execute(select(Job.owner_user_id, Job.title)).all())
    assert titles == {"alice": "mine", "bob": "t"}


def test_new_rows_are_stamped_and_checked(two_owners: Database) -> None:
    with two_owners.owner("alice") as session:
        session.add(_job("c" * 32))
    with two_owners.neutral(write=False) as session:
        assert session.get(Job, "c" * 32).owner_user_id == "alice"  # type: ignore[union-attr]
    with pytest.raises(OwnerMismatch), two_owners.owner("alice") as session:
        session.add(_job("d" * 32, owner="bob"))


def test_times_round_trip_as_utc_with_microseconds(two_owners: Database) -> None:
    with two_owners.owner("alice", write=False) as session:
        job = session.get(Job, "a" * 32)
    assert job is not None
    assert job.created_at == NOW
    assert job.created_at.tzinfo is UTC


def test_neutral_scope_sees_everyone(two_owners: Database) -> None:
    with two_owners.neutral(write=False) as session:
        assert session.scalar(select(func.count()).select_from(Job)) == 2
        assert session.scalar(select(func.count()).select_from(UserNotification)) == 0


def test_deleting_an_operation_keeps_its_notification_unlinked(database: Database) -> None:
    from durable_ops.model.states import OperationState
    from durable_ops.storage import notifications, operations
    from durable_ops.storage.schema import UserOperation
    from durable_ops.storage.tx import Tx

    request = operations.CreateRequest("report.build", "k", "report", "r1")
    with database.owner("alice") as session:
        op, _ = operations.create(Tx.of(session), request, NOW)
    with database.neutral() as session:
        notifications.insert_for_operations(Tx.of(session), [op.id], OperationState.SUCCEEDED, NOW)
    with database.neutral() as session:  # history cleanup is an operator's, unscoped, act
        session.execute(delete(UserOperation).where(UserOperation.id == op.id))
    with database.owner("alice", write=False) as session:
        (kept,) = session.scalars(select(UserNotification)).all()
    assert kept.operation_id is None  # ON DELETE SET NULL, on both engines
    assert kept.title == "Operation is ready"
