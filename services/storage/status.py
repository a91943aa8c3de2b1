"""What ``opsctl status`` reads of the database itself: its engine, its schema's
revision against this release's head, and the live AI switch. It only reads, and
never makes the SQLite file it was pointed at."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sqlalchemy.engine import make_url

from durable_ops.model.health import DatabaseReading
from durable_ops.storage import capacity, migrate
from durable_ops.storage.availability import DatabaseUnavailable
from durable_ops.storage.db import Database


def read(url: str) -> tuple[DatabaseReading, bool | None]:
    """The database at ``url`` and its AI switch: None under a schema behind this release,
    whose tables may not be there yet. Raises what the driver raises (``reaching`` words
    it), and ``DatabaseUnavailable`` for a SQLite file that is not there."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        path = parsed.database or ""
        if path in ("", ":memory:") or not Path(path).exists():
            raise DatabaseUnavailable("does not exist: `opsctl migrate` (or `opsctl up`) makes it")
    db = Database(url, pool_size=1)
    try:
        engine, version = _engine(db)
        current = migrate.current_revision(db.engine)
        head, pending = migrate.revisions_ahead(current)
        switch = None
        if current is not None and not pending:
            switch = db.run(capacity.ai_enabled, owner_id=None, write=False)
    finally:
        db.dispose()
    return DatabaseReading(engine, version, current, head, [rev for rev, _ in pending]), switch


def _engine(db: Database) -> tuple[str, str]:
    """Its engine's name and version, from a first connection: the one that would fail."""
    with db.engine.connect() as connection:
        dialect = connection.dialect
    if db.is_sqlite:
        return "SQLite", sqlite3.sqlite_version
    numbers = [str(part) for part in dialect.server_version_info or () if isinstance(part, int)]
    return ("MariaDB" if getattr(dialect, "is_mariadb", False) else "MySQL"), ".".join(numbers)
