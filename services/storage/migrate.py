"""Schema ownership: ``opsctl migrate`` moves the schema; services only check it.

As the seeds require, no service migrates at start-up: each one calls
``require_current`` and refuses to start on a database that is not at head.

Alembic (with Mako and Pygments behind it, about a second of imports) is
loaded only to move the schema or to judge a revision that is not head: a
service's start and ``opsctl up`` on a current database read the stamped
revision with one SELECT and the head from the revision files' own lines.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import structlog
from sqlalchemy import Engine, inspect, text

import durable_ops.migrations
from durable_ops.model.errors import InvalidArgument
from durable_ops.storage.db import Database, create_db_engine
from durable_ops.storage.schema_stamp import quick_head

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import Script, ScriptDirectory

# migrations/ at the repository root, installed as durable_ops.migrations.
MIGRATIONS = Path(durable_ops.migrations.__file__).parent
log = structlog.get_logger(__name__)
VERSION_TABLE = "alembic_version"
_STAMPED = text("SELECT version_num FROM alembic_version")


class SchemaNotCurrent(RuntimeError):
    """The database is not at the schema this code was built for."""


def alembic_config(url: str, *, script_location: Path = MIGRATIONS) -> Config:
    """Built in code, so an installed wheel needs no alembic.ini.

    ``script_location`` is another copy of the migrations folder only in tests
    that add a revision to a temporary copy.
    """
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(script_location))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def _scripts(script_location: Path = MIGRATIONS) -> ScriptDirectory:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config("sqlite://", script_location=script_location))


def head_revision() -> str:
    """The newest revision of ``migrations/`` (Alembic's answer: ``quick_head`` is checked
    against it in the tests: ``schema_stamp.quick_head``)."""
    head = _scripts().get_current_head()
    assert head is not None
    return head


def current_revision(engine: Engine) -> str | None:
    """The revision stamped in the database; None when it has none (empty)."""
    with engine.connect() as connection:
        if not inspect(connection).has_table(VERSION_TABLE):
            return None
        stamped = list(connection.execute(_STAMPED).scalars())
        if len(stamped) <= 1:
            return stamped[0] if stamped else None
        # Branches, which these migrations never make: Alembic's own refusal.
        from alembic.runtime.migration import MigrationContext

        return MigrationContext.configure(connection).get_current_revision()


def stamped_revision(url: str) -> str | None:
    """The revision stamped in the database at ``url``; None when it has none (empty)."""
    engine = create_db_engine(url)
    try:
        return current_revision(engine)
    finally:
        engine.dispose()


def upgrade(url: str, revision: str = "head", *, script_location: Path = MIGRATIONS) -> None:
    """Move the schema up to ``revision``. A database a newer release migrated is left as
    it is for head (this release runs on it: ``require_current``), and refused for a
    named revision, which this release cannot reach from a revision it does not know."""
    current = stamped_revision(url)  # its engine makes the SQLite file and its folder, private
    if revision == "head" and script_location == MIGRATIONS and _at_quick_head(current):
        return  # nothing to do: no Alembic to load
    if _newer_than_code(current, revision, script_location):
        return
    from alembic import command

    command.upgrade(alembic_config(url, script_location=script_location), revision)


def _newer_than_code(
    current: str | None, revision: str, script_location: Path = MIGRATIONS
) -> bool:
    """Whether the database is at a revision a newer release wrote: logged for head, which
    it is past already; a ``SchemaNotCurrent`` for any other target. Alembic itself only
    says "Can't locate revision", in a traceback: the older release's application rollback
    (docs/operations.md) failed at its migrate step, and Compose then started nothing."""
    if current is None or _known(current, script_location):
        return False
    if revision == "head":
        log.warning("schema_newer_than_code", database_revision=current, code_head=head_revision())
        return True
    raise SchemaNotCurrent(
        f"the database schema is at {current}, which a newer release wrote and this one"
        f" does not know: move it to {revision} with that release's `opsctl migrate --to`"
    )


def _at_quick_head(current: str | None) -> bool:
    """Whether ``current`` is the head the revision files name, read without Alembic."""
    return current is not None and current == quick_head()


def downgrade(url: str, revision: str, *, script_location: Path = MIGRATIONS) -> None:
    from alembic import command

    command.downgrade(alembic_config(url, script_location=script_location), revision)


def migrate_to(url: str, revision: str) -> None:
    """Upgrade or downgrade, whichever reaches ``revision`` (``base`` drops everything)."""
    current = stamped_revision(url)
    if _newer_than_code(current, revision):
        return
    if revision == "base":
        downgrade(url, "base")
        return
    script = _scripts()
    target = _revision(script, revision).revision
    if _undone(script, current, target):
        downgrade(url, target)
    else:
        upgrade(url, target)


def revisions_undone(current: str | None, revision: str) -> list[tuple[str, str]]:
    """What moving the schema from ``current`` to ``revision`` undoes, newest first: each
    revision and what it added (the first paragraph of its docstring), all of which the
    move drops with what it holds; what ``opsctl migrate --to`` asks about. Empty for a
    move up or none, and where ``migrate_to`` refuses the move itself: a ``current`` a
    newer release wrote, a ``revision`` there is none of."""
    if current is None or not _known(current):
        return []
    script = _scripts()
    if revision == "base":
        target = None
    else:
        try:
            target = _revision(script, revision).revision
        except InvalidArgument:
            return []
    return [(rev.revision, " ".join(rev.doc.split())) for rev in _undone(script, current, target)]


def _revision(script: ScriptDirectory, revision: str) -> Script:
    """The revision ``revision`` names (``head``, or a unique beginning such as ``0002``);
    ``InvalidArgument`` listing the known ones for a name no revision has."""
    from alembic.util import CommandError

    try:
        found = script.get_revision(revision)
    except CommandError:  # alembic's word for a name no revision has
        found = None
    if found is None:
        known = ", ".join(["base", *sorted(rev.revision for rev in script.walk_revisions())])
        raise InvalidArgument("--to", f"no revision {revision!r}; known: {known}")
    return found


def _undone(script: ScriptDirectory, current: str | None, target: str | None) -> list[Script]:
    """The revisions from ``current`` down to, not including, ``target`` (None: base),
    newest first: what a downgrade undoes. Empty when ``target`` is not below ``current``."""
    if current is None:
        return []
    below = list(script.iterate_revisions(current, "base"))  # ``current`` first
    if target is None:
        return below
    found = [rev.revision for rev in below]
    return below[: found.index(target)] if target in found else []


def _known(revision: str, script_location: Path = MIGRATIONS) -> bool:
    from alembic.script.revision import ResolutionError
    from alembic.util import CommandError

    try:
        return _scripts(script_location).get_revision(revision) is not None
    except (ResolutionError, CommandError):  # alembic wraps the first in the second
        return False


def require_current(engine: Engine) -> None:
    """Refuse a database behind this code; accept a newer one (revisions are additive).

    A revision this code does not know was written by a newer release. Every
    revision only adds (tables, nullable columns, indexes), so an older release
    keeps working on it: that is the seeds' safer application rollback.
    """
    current = current_revision(engine)
    if _at_quick_head(current):
        return
    head = head_revision()
    if current == head or _newer_than_code(current, "head"):
        return
    raise SchemaNotCurrent(
        f"database schema is at {current or 'nothing (empty database)'}, "
        f"this code needs {head}: run `opsctl migrate` first"
    )


def open_migrated(url: str, *, pool_size: int = 10) -> Database:
    """The database a service runs on, refused unless it is at head."""
    db = Database(url, pool_size=pool_size)
    try:
        require_current(db.engine)
    except Exception:
        db.dispose()
        raise
    return db
