"""What a test reads behind the services' backs: rows as stored, in the neutral scope."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Executable, Row, select

from durable_ops.storage import operations
from durable_ops.storage.db import Database
from durable_ops.storage.schema import UserOperation


def rows(db: Database, query: Executable) -> list[Any]:
    """Every row ``query`` reads (typed ``Any``: a test unpacks them, or reads them by name)."""
    return db.run(lambda tx: list(tx.execute(query)), owner_id=None, write=False)


def row(db: Database, query: Executable) -> Row[Any] | None:
    """The one row ``query`` reads, or None."""
    return db.run(lambda tx: tx.execute(query).one_or_none(), owner_id=None, write=False)


def scalar(db: Database, query: Executable) -> Any:
    return db.run(lambda tx: tx.execute(query).scalar(), owner_id=None, write=False)


def operation(db: Database, operation_id: str) -> UserOperation | None:
    """The operation row as stored, whoever owns it."""
    found = row(db, select(UserOperation).where(UserOperation.id == operation_id))
    return None if found is None else operations.detached(found._mapping)
