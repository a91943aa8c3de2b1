"""Database.run replays a whole transaction that MariaDB chose as a deadlock victim,
or that Galera refused at COMMIT, and resolves a COMMIT whose connection was lost."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import grpc
import pymysql
import pytest
from sqlalchemy import Update, insert, make_url, select, text, update
from sqlalchemy.exc import ProgrammingError

from durable_ops.model.errors import Unavailable
from durable_ops.model.held_leases import HeldLease
from durable_ops.model.lifecycle import Event
from durable_ops.rpc.errors import status_for
from durable_ops.storage import operations, workspace
from durable_ops.storage.availability import DatabaseUnavailable, reaching
from durable_ops.storage.db import Database
from durable_ops.storage.schema import UserOperation
from durable_ops.storage.tx import SCOPE_OWNER, Tx
from tests.conftest import EmptyDatabase
from tests.support.ports import refusing_port
from tests.support.stored import rows as stored_rows

NOW = datetime(2026, 11, 30, tzinfo=UTC)
FIRST, SECOND = "1" * 32, "2" * 32


JOBS = workspace.JOBS


def _seed(db: Database) -> None:
    job = {"title": "t", "company": "", "description": "d", "created_at": NOW, "updated_at": NOW}
    stamped = insert(JOBS).values(owner_user_id=SCOPE_OWNER)
    rows = [{"id": job_id, **job} for job_id in (FIRST, SECOND)]
    db.run(lambda tx: tx.execute_many(stamped, rows), owner_id="alice")


def _set(job_id: str, **values: str) -> Update:
    """An UPDATE of the scope owner's job ``job_id``."""
    return (
        update(JOBS)
        .where(JOBS.c.id == job_id, JOBS.c.owner_user_id == SCOPE_OWNER)
        .values(**values)
    )


def test_a_deadlock_victim_is_retried_and_both_transactions_land(
    empty_mariadb: EmptyDatabase,
) -> None:
    db = Database(empty_mariadb(), pool_size=4)
    _seed(db)
    both_hold_one = threading.Barrier(2, timeout=10)
    attempts = {"a": 0, "b": 0}
    errors: list[BaseException] = []

    def crossing(name: str, first: str, second: str) -> None:
        def work(tx: Tx) -> None:
            attempts[name] += 1
            tx.execute(_set(first, title=f"{name}-1"))
            if attempts[name] == 1:  # only the first attempt waits: the replay runs alone
                both_hold_one.wait()
            tx.execute(_set(second, company=name))

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
        companies = {company for (company,) in stored_rows(db, select(JOBS.c.company))}
        assert companies <= {"a", "b"}
        assert companies != {""}
    finally:
        db.dispose()


def test_errors_other_than_deadlock_or_lock_wait_are_not_retried(
    migrated_mariadb_url: str,
) -> None:
    db = Database(migrated_mariadb_url, pool_size=1)
    calls = 0

    def broken(tx: Tx) -> None:
        nonlocal calls
        calls += 1
        tx.connection.exec_driver_sql("SELECT * FROM no_such_table")

    try:
        with pytest.raises(ProgrammingError):
            db.run(broken, owner_id="alice")
        assert calls == 1
    finally:
        db.dispose()


def test_an_unreachable_database_is_unavailable_not_an_internal_error() -> None:
    """A server that is away is an expected state: UNAVAILABLE over gRPC, which clients retry."""
    db = Database(f"mysql+pymysql://root@127.0.0.1:{refusing_port()}/nowhere", pool_size=1)
    try:
        with pytest.raises(Unavailable) as raised:
            db.run(lambda tx: tx.execute(text("SELECT 1")), owner_id=None, write=False)
        assert raised.value.code == "database_unavailable"
        assert status_for(raised.value) == grpc.StatusCode.UNAVAILABLE
    finally:
        db.dispose()


def test_a_database_that_refuses_us_once_running_is_unavailable_not_an_internal_error(
    mariadb_server_url: str,
) -> None:
    """In an incident drill the stack's MariaDB account was locked (``ALTER USER … ACCOUNT
    LOCK``, as a revoked grant or a rotated password does): every call then logged
    ``rpc_unexpected_error`` with a stack trace, 41 in half a minute, and answered INTERNAL.
    Refused once running, the database is away for the caller as in an outage: UNAVAILABLE.
    A command still says it refused us, in the driver's words (``reaching``)."""
    stranger = make_url(mariadb_server_url).set(
        username=f"nobody_{secrets.token_hex(4)}", password="wrong", database="nowhere"
    )
    url = stranger.render_as_string(hide_password=False)
    db = Database(url, pool_size=1)
    try:
        with pytest.raises(Unavailable) as raised:
            db.run(lambda tx: tx.execute(text("SELECT 1")), owner_id=None, write=False)
        assert raised.value.code == "database_unavailable"
        assert status_for(raised.value) == grpc.StatusCode.UNAVAILABLE
        with pytest.raises(DatabaseUnavailable) as said, reaching(url, "--database-url"):
            db.run(lambda tx: tx.execute(text("SELECT 1")), owner_id=None, write=False)
        assert " (from --database-url) refused us: " in str(said.value)
        assert "Access denied" in str(said.value)
        assert "wrong" not in str(said.value)
    finally:
        db.dispose()


# ---- Galera's errors and lost COMMITs, on a real MariaDB with the COMMIT made to fail ----

TASK = "test.commit"


def _request(key: str) -> operations.CreateRequest:
    return operations.CreateRequest(
        task_type=TASK, idempotency_key=key, subject_type="job", subject_id="j"
    )


def _create(db: Database, key: str) -> tuple[UserOperation, bool]:
    return db.run(lambda tx: operations.create(tx, _request(key), NOW), owner_id="alice")


def _claim(db: Database) -> operations.Claim | None:
    claims = db.run(lambda tx: operations.claim(tx, [TASK], 60, NOW), owner_id=None)
    return claims[0] if claims else None


def _states(db: Database) -> dict[str, str]:
    with db.engine.connect() as connection:
        rows = connection.execute(text("SELECT id, state FROM user_operations")).all()
    return {row.id: row.state for row in rows}


def _failing_commits(
    monkeypatch: pytest.MonkeyPatch, db: Database, failures: list[Callable[[Any], None]]
) -> list[str]:
    """Each COMMIT in turn runs the next of ``failures`` instead of committing, then commits."""
    dialect = db.engine.dialect
    real = dialect.do_commit
    seen: list[str] = []

    def do_commit(dbapi_connection: Any) -> None:
        if failures:
            seen.append("failed")
            failures.pop(0)(dbapi_connection)
            return
        seen.append("committed")
        real(dbapi_connection)

    monkeypatch.setattr(dialect, "do_commit", do_commit)
    return seen


def _refused(code: int, message: str) -> Callable[[Any], None]:
    """The server refuses the COMMIT (it rolled the transaction back), as Galera does."""

    def fail(dbapi_connection: Any) -> None:
        dbapi_connection.rollback()
        raise pymysql.err.OperationalError(code, message)

    return fail


def _committed_then_lost(dbapi_connection: Any) -> None:
    dbapi_connection.commit()
    dbapi_connection.close()
    raise pymysql.err.OperationalError(2013, "Lost connection to server during query")


def _lost_before_commit(dbapi_connection: Any) -> None:
    dbapi_connection.close()  # the server rolls the open transaction back
    raise pymysql.err.OperationalError(2013, "Lost connection to server during query")


@pytest.fixture
def mariadb(empty_mariadb: EmptyDatabase) -> Iterator[Database]:
    db = Database(empty_mariadb(), pool_size=2)
    try:
        yield db
    finally:
        db.dispose()


@pytest.mark.parametrize(
    ("code", "message"),
    [
        (1213, "WSREP detected deadlock/conflict and aborted the transaction. Try restarting"),
        (1047, "WSREP has not yet prepared node for application use"),
    ],
)
def test_a_commit_refused_by_galera_is_replayed_as_a_whole(
    mariadb: Database, monkeypatch: pytest.MonkeyPatch, code: int, message: str
) -> None:
    """engine.begin() commits inside the attempt, so a 1213 at COMMIT reaches the retry."""
    seen = _failing_commits(monkeypatch, mariadb, [_refused(code, message)])
    row, created = _create(mariadb, "refused-core")
    assert created
    assert seen == ["failed", "committed"]
    assert _states(mariadb) == {row.id: "queued"}  # the replay's row, the refused one is gone
    assert mariadb.retries[code] == 1


def test_a_claim_whose_commit_was_lost_but_landed_is_the_claim(
    mariadb: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    _create(mariadb, "one")
    _create(mariadb, "two")
    _failing_commits(monkeypatch, mariadb, [_committed_then_lost])
    claim = _claim(mariadb)
    assert claim is not None  # found by its lease token hash: not a second claim
    claimed = claim.operation.id
    assert _states(mariadb)[claimed] == "running"
    assert sorted(_states(mariadb).values()) == ["queued", "running"]
    assert mariadb.lost_commits == {"committed": 1}
    beat = mariadb.run(
        lambda tx: operations.heartbeat(
            tx, HeldLease(claimed, "alice", claim.lease_token, 60), NOW
        ),
        owner_id="alice",
    )
    assert beat[1] is False  # the token returned is the live lease


def test_a_claim_whose_commit_was_lost_before_it_landed_is_claimed_again(
    mariadb: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    _create(mariadb, "one")
    _create(mariadb, "two")
    seen = _failing_commits(monkeypatch, mariadb, [_lost_before_commit])
    claim = _claim(mariadb)
    assert claim is not None
    assert seen == ["failed", "committed"]  # not claimed, so the claim ran again
    assert sorted(_states(mariadb).values()) == ["queued", "running"]
    assert mariadb.lost_commits == {"not_committed": 1}


def test_a_create_whose_commit_was_lost_is_resolved_by_its_row(
    mariadb: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    _failing_commits(monkeypatch, mariadb, [_committed_then_lost])
    landed, created = _create(mariadb, "landed")
    assert created  # this call's INSERT committed: it did create it
    _failing_commits(monkeypatch, mariadb, [_lost_before_commit])
    replayed, created_again = _create(mariadb, "replayed")
    assert created_again
    assert set(_states(mariadb)) == {landed.id, replayed.id}
    assert mariadb.lost_commits == {"committed": 1, "not_committed": 1}


def test_lease_mutations_whose_commit_was_lost_are_resolved_by_rereading_the_row(
    mariadb: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    _create(mariadb, "one")
    claim = _claim(mariadb)
    assert claim is not None
    op_id, token = claim.operation.id, claim.lease_token
    _failing_commits(monkeypatch, mariadb, [_committed_then_lost, _committed_then_lost])
    mariadb.run(
        lambda tx: operations.heartbeat(tx, HeldLease(op_id, "alice", token, 60, 10), NOW),
        owner_id="alice",
    )
    completion = operations.Settlement("alice", op_id, token, Event.COMPLETE)
    state = mariadb.run(lambda tx: operations.settle_one(tx, completion, NOW), owner_id="alice")
    assert state == "succeeded"
    assert mariadb.lost_commits == {"committed": 2}
    with mariadb.engine.connect() as connection:
        notes = connection.execute(text("SELECT COUNT(*) FROM user_notifications")).scalar()
    assert notes == 1


def test_a_lost_commit_of_work_that_cannot_tell_is_unavailable(
    mariadb: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    _seed(mariadb)
    _failing_commits(monkeypatch, mariadb, [_committed_then_lost])

    def rename(tx: Tx) -> None:
        tx.execute(_set(FIRST, title="renamed"))

    with pytest.raises(Unavailable) as raised:
        mariadb.run(rename, owner_id="alice")
    assert raised.value.code == "database_unavailable"
    assert mariadb.lost_commits == {}
