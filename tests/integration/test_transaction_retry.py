"""Database.run replays a whole transaction that MariaDB chose as a deadlock victim."""

from __future__ import annotations

import socket
import threading
from datetime import UTC, datetime

import grpc
import pytest
from sqlalchemy import select, text, update
from sqlalchemy.exc import ProgrammingError
from sqlalchemy.orm import Session

from durable_ops.model.errors import Unavailable
from durable_ops.rpc.errors import status_for
from durable_ops.storage.db import Database
from durable_ops.storage.schema import Job
from tests.conftest import _empty_all_tables

NOW = datetime(2026, 11, 30, tzinfo=UTC)
FIRST, SECOND = "1" * 32, "2" * 32


def _seed(db: Database) -> None:
    with db.owner("alice") as session:
        for job_id in (FIRST, SECOND):
            session.add(
                Job(
                    id=job_id,
                    title="t",
                    company="",
                    description="d",
                    created_at=NOW,
                    updated_at=NOW,
                )
            )


def test_a_deadlock_victim_is_retried_and_both_transactions_land(
    migrated_mariadb_url: str,
) -> None:
    _empty_all_tables(migrated_mariadb_url)
    db = Database(migrated_mariadb_url, pool_size=4)
    _seed(db)
    both_hold_one = threading.Barrier(2, timeout=10)
    attempts = {"a": 0, "b": 0}
    errors: list[BaseException] = []

    def crossing(name: str, first: str, second: str) -> None:
        def work(session: Session) -> None:
            attempts[name] += 1
            session.execute(update(Job).where(Job.id == first).values(title=f"{name}-1"))
            if attempts[name] == 1:  # only the first attempt waits: the replay runs alone
                both_hold_one.wait()
            session.execute(update(Job).where(Job.id == second).values(company=name))

        try:
            db.run(work, owner_id="alice")
        except BaseException as exc:  # surfaced to the test thread below
            errors.append(exc)

    threads = [
        threading.Thread(target=crossing, args=("a", FIRST, SECOND)),
        threading.Thread(target=crossing, args=("b", SECOND, FIRST)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    try:
        assert errors == []
        assert sorted(attempts.values()) == [1, 2]  # exactly one victim, replayed once
        with db.owner("alice", write=False) as session:
            companies = set(session.scalars(select(Job.company)))
        assert companies <= {"a", "b"}
        assert companies != {""}
    finally:
        db.dispose()


def test_errors_other_than_deadlock_or_lock_wait_are_not_retried(
    migrated_mariadb_url: str,
) -> None:
    db = Database(migrated_mariadb_url, pool_size=1)
    calls = 0

    def broken(session: Session) -> None:
        nonlocal calls
        calls += 1
        session.connection().exec_driver_sql("SELECT * FROM no_such_table")

    try:
        with pytest.raises(ProgrammingError):
            db.run(broken, owner_id="alice")
        assert calls == 1
    finally:
        db.dispose()


def test_an_unreachable_database_is_unavailable_not_an_internal_error() -> None:
    """A server that is away is an expected state: UNAVAILABLE over gRPC, which clients retry."""
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    db = Database(f"mysql+pymysql://root@127.0.0.1:{closed}/nowhere", pool_size=1)
    try:
        with pytest.raises(Unavailable) as raised:
            db.run(lambda session: session.execute(text("SELECT 1")), owner_id=None, write=False)
        assert raised.value.code == "database_unavailable"
        assert status_for(raised.value) == grpc.StatusCode.UNAVAILABLE
    finally:
        db.dispose()
