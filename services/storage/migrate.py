"""Schema ownership: ``opsctl migrate`` moves the schema; services only check it.

As the seeds require, no service migrates at start-up: each one calls
``require_current`` and refuses to start on a database that is not at head.
"""

from __future__ import annotations

from pathlib import Path

import structlog
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.script.revision import ResolutionError
from alembic.util import CommandError
from sqlalchemy import Engine

import durable_ops.migrations
from durable_ops.model.errors import InvalidArgument
from durable_ops.storage.db import Database, create_db_engine

# migrations/ at the repository root, installed as durable_ops.migrations.
MIGRATIONS = Path(durable_ops.migrations.__file__).parent
log = structlog.get_logger(__name__)


class SchemaNotCurrent(RuntimeError):
    """The database is not at the schema this code was built for."""


def alembic_config(url: str, *, script_location: Path = MIGRATIONS) -> Config:
    """Built in code, so an installed wheel needs no alembic.ini.

    ``script_location`` is another copy of the migrations folder only in tests
    that add a revision to a temporary copy.
    """
    config = Config()
    config.set_main_option("script_location", str(script_location))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def _scripts() -> ScriptDirectory:
    return ScriptDirectory.from_config(alembic_config("sqlite://"))


def head_revision() -> str:
    head = _scripts().get_current_head()
    assert head is not None
    return head


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def upgrade(url: str, revision: str = "head", *, script_location: Path = MIGRATIONS) -> None:
    _prepare(url)
    command.upgrade(alembic_config(url, script_location=script_location), revision)


def downgrade(url: str, revision: str, *, script_location: Path = MIGRATIONS) -> None:
    command.downgrade(alembic_config(url, script_location=script_location), revision)


def migrate_to(url: str, revision: str) -> None:
    """Upgrade or downgrade, whichever reaches ``revision`` (``base`` drops everything)."""
    engine = create_db_engine(url)
    try:
        current = current_revision(engine)
    finally:
        engine.dispose()
    script = ScriptDirectory.from_config(alembic_config(url))
    if revision == "base":
        downgrade(url, "base")
        return
    try:
        target = script.get_revision(revision)
    except CommandError:  # alembic's word for a name no revision has
        target = None
    if target is None:
        known = ", ".join(["base", *sorted(rev.revision for rev in script.walk_revisions())])
        raise InvalidArgument("--to", f"no revision {revision!r}; known: {known}")
    ancestors_of_current = (
        {rev.revision for rev in script.iterate_revisions(current, "base")} if current else set()
    )
    if target.revision in ancestors_of_current and target.revision != current:
        downgrade(url, target.revision)
    else:
        upgrade(url, target.revision)


def _known(revision: str) -> bool:
    try:
        return (
            ScriptDirectory.from_config(alembic_config("sqlite://")).get_revision(revision)
            is not None
        )
    except (ResolutionError, CommandError):  # alembic wraps the first in the second
        return False


def require_current(engine: Engine) -> None:
    """Refuse a database behind this code; accept a newer one (revisions are additive).

    A revision this code does not know was written by a newer release. Every
    revision only adds (tables, nullable columns, indexes), so an older release
    keeps working on it: that is the seeds' safer application rollback.
    """
    current, head = current_revision(engine), head_revision()
    if current == head:
        return
    if current is not None and not _known(current):
        log.warning("schema_newer_than_code", database_revision=current, code_head=head)
        return
    raise SchemaNotCurrent(
        f"database schema is at {current or 'nothing (empty database)'}, "
        f"this code needs {head}: run `opsctl migrate` first"
    )


def _prepare(url: str) -> None:
    engine = create_db_engine(url)  # creates the SQLite file and its folder, private
    engine.dispose()


def open_migrated(url: str, *, pool_size: int = 10) -> Database:
    """The database a service runs on, refused unless it is at head."""
    db = Database(url, pool_size=pool_size)
    try:
        require_current(db.engine)
    except Exception:
        db.dispose()
        raise
    return db
