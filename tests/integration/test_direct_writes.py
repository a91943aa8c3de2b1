"""Hot writes on the driver's cursor (``storage.direct``) do what ``Connection.execute`` does.

The same statement written both ways stores the same values (times, enums
and booleans through their types' bind processors), matches the same rows,
keeps the scope rule, and fails the same way: a duplicate key is SQLAlchemy's
``IntegrityError``. While anyone listens to ``before_cursor_execute`` every
write takes the usual path, so statement counters see it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any, cast

import pytest
from sqlalchemy import Table, bindparam, insert, select, update
from sqlalchemy.exc import IntegrityError

from durable_ops.model.states import OperationState, Privacy
from durable_ops.storage import direct
from durable_ops.storage.db import Database
from durable_ops.storage.schema import UserOperation
from durable_ops.storage.tx import SCOPE_OWNER, ScopeViolation, Tx

NOW = datetime(2026, 12, 2, 17, 30, 5, 123456, tzinfo=UTC)
# The same instant two hours east: only its type's bind processor stores it as UTC.
NOW_EAST = NOW.astimezone(timezone(timedelta(hours=2)))
OPS = cast(Table, UserOperation.__table__)
QUEUED_ROW: dict[str, Any] = {
    "task_type": "report.build",
    "request_hash": "h" * 64,
    "subject_type": "report",
    "subject_id": "r1",
    "state": OperationState.QUEUED,
    "priority": 3,
    "attempt": 0,
    "max_attempts": 3,
    "retry_delay_seconds": 30,
    "privacy": Privacy.EXTERNAL_ALLOWED,
    "progress_percent": 0,
    "cancel_requested": False,
    "created_at": NOW,
    "updated_at": NOW,
}
INSERT = insert(OPS).values(
    {name: bindparam(name) for name in ("id", "owner_user_id", "idempotency_key", *QUEUED_ROW)}
)
# A value bound in the statement (the state), one from the caller, one from the scope.
FINISH = (
    update(OPS)
    .where(OPS.c.id == bindparam("operation_id"), OPS.c.owner_user_id == SCOPE_OWNER)
    .values(state=OperationState.SUCCEEDED, cancel_requested=True, finished_at=bindparam("now"))
)


def _row(operation_id: str, owner: str) -> dict[str, Any]:
    key = f"key-{operation_id}"
    return {"id": operation_id, "owner_user_id": owner, "idempotency_key": key, **QUEUED_ROW}


def _stored(database: Database, operation_id: str) -> dict[str, Any]:
    row = database.run(
        lambda tx: tx.execute(select(OPS).where(OPS.c.id == operation_id)).one(), owner_id=None
    )
    values = dict(row._mapping)
    values.pop("id")
    values.pop("idempotency_key")
    return values


def test_a_direct_write_stores_what_the_usual_path_stores(database: Database) -> None:
    database.run(lambda tx: tx.write(INSERT, _row("a" * 32, "alice")), owner_id=None)
    database.run(lambda tx: tx.execute(INSERT, _row("b" * 32, "alice")), owner_id=None)
    assert _stored(database, "a" * 32) == _stored(database, "b" * 32)
    assert _stored(database, "a" * 32)["created_at"] == NOW

    finish = {"now": NOW_EAST}
    written = database.run(
        lambda tx: tx.write(FINISH, {**finish, "operation_id": "a" * 32}), owner_id="alice"
    )
    executed = database.run(
        lambda tx: tx.execute(FINISH, {**finish, "operation_id": "b" * 32}).rowcount,
        owner_id="alice",
    )
    assert written == executed == 1
    assert _stored(database, "a" * 32) == _stored(database, "b" * 32)
    finished = _stored(database, "a" * 32)
    assert (finished["state"], finished["cancel_requested"]) == (OperationState.SUCCEEDED, True)
    assert finished["finished_at"] == NOW


def test_a_direct_write_keeps_the_owner_scope(database: Database) -> None:
    database.run(lambda tx: tx.write(INSERT, _row("c" * 32, "bob")), owner_id=None)
    other = {"now": NOW, "operation_id": "c" * 32, "scope_owner": "bob"}
    assert database.run(lambda tx: tx.write(FINISH, other), owner_id="alice") == 0
    with pytest.raises(ScopeViolation):
        database.run(lambda tx: tx.write(FINISH, other), owner_id=None)
    assert _stored(database, "c" * 32)["state"] == OperationState.QUEUED


def test_a_duplicate_key_is_sqlalchemys_integrity_error_and_the_transaction_goes_on(
    database: Database,
) -> None:
    database.run(lambda tx: tx.write(INSERT, _row("d" * 32, "carol")), owner_id=None)

    def again_then_finish(tx: Tx) -> int:
        with pytest.raises(IntegrityError):
            tx.write(INSERT, _row("d" * 32, "carol"))
        # The refused INSERT undid only itself, as one through Connection.execute does.
        finish = {"now": NOW, "operation_id": "d" * 32}
        return Tx(tx.connection, "carol").write(FINISH, finish)

    assert database.run(again_then_finish, owner_id=None) == 1
    assert _stored(database, "d" * 32)["state"] == OperationState.SUCCEEDED


def test_writes_take_the_usual_path_while_statements_are_counted(database: Database) -> None:
    seen: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        seen.append(statement)

    database.listen("before_cursor_execute", count)
    try:
        database.run(lambda tx: tx.write(INSERT, _row("e" * 32, "dave")), owner_id=None)
    finally:
        database.unlisten("before_cursor_execute", count)
    assert [s for s in seen if s.startswith("INSERT INTO user_operations")]


def test_only_plain_inserts_and_updates_are_prepared(database: Database) -> None:
    dialect = database.engine.dialect
    assert direct._prepare(INSERT, dialect) is not None
    assert direct._prepare(FINISH, dialect) is not None
    assert direct._prepare(select(OPS), dialect) is None
    expanding = update(OPS).where(OPS.c.id.in_(bindparam("ids", expanding=True)))
    assert direct._prepare(expanding.values(priority=1), dialect) is None
