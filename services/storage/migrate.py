"""Schema ownership: ``opsctl migrate`` moves the schema; services only check it.

As the seeds require, no service migrates at start-up: each one calls
``require_current`` and refuses to start on a database that is not at head.

Alembic (with Mako and Pygments behind it, about a second of imports) is
loaded only to move the schema or to judge a revision that is not head: a
service's start and ``opsctl up`` on a current database read the stamped
revision with one SELECT and the head from the revision files' own lines.

Every move of the schema holds the database's migration lock (``migration_lock``):
two ``opsctl migrate`` at once (two ``opsctl up``, two init containers starting
together) take turns, and the second finds nothing left to do.
"""

from __future__ import annotations

import contextlib
import contextvars
import fcntl
import hashlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import structlog
from sqlalchemy import Engine, inspect, text
from sqlalchemy.engine import make_url

import durable_ops.migrations
from durable_ops.model.errors import InvalidArgument
from durable_ops.private_files import FILE_MODE, prepare_sqlite_file
from durable_ops.storage.db import Database, create_db_engine, on_galera
from durable_ops.storage.schema_stamp import quick_head

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import Script, ScriptDirectory

# migrations/ at the repository root, installed as durable_ops.migrations.
MIGRATIONS = Path(durable_ops.migrations.__file__).parent
log = structlog.get_logger(__name__)
VERSION_TABLE = "alembic_version"
_STAMPED = text("SELECT version_num FROM alembic_version")
# How long a move of the schema waits for another one of the same database to end; a
# revision that rebuilds a large table may take minutes.
MIGRATION_LOCK_WAIT_SECONDS = 600.0
LOCK_POLL_SECONDS = 0.1  # a SQLite file's lock is polled: flock has no timeout
# The databases whose migration lock this thread (this context) holds.
_HELD_LOCKS: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar(
    "durable_ops_migration_locks", default=frozenset()
)


class SchemaNotCurrent(RuntimeError):
    """The database is not at the schema this code was built for."""


class MigrationLocked(RuntimeError):
    """Another process has been moving the schema for longer than the lock's wait."""


@contextlib.contextmanager
def migration_lock(url: str) -> Iterator[None]:
    """Held while the schema of the database at ``url`` moves: a second move waits (one
    ``migration_waiting`` line) for the first, where Alembic alone let both apply the
    first revision and one crash on the version row. ``MigrationLocked`` after
    ``MIGRATION_LOCK_WAIT_SECONDS``. On MariaDB a named lock (``GET_LOCK``) of a
    connection held meanwhile, none on a Galera node, which refuses ``GET_LOCK`` (run one
    migration at a time there); on a SQLite file an exclusive ``flock`` of
    ``<file>-migrate.lock`` beside it: SQLite's own lock cannot be held across revisions
    that each commit. Taken again in the same thread (``opsctl migrate`` holds it from
    its first read of the revision to its last), it is already held."""
    held = _HELD_LOCKS.get()
    if url in held:
        yield
        return
    holding = _HELD_LOCKS.set(held | {url})
    try:
        with _lock_of(url):
            yield
    finally:
        _HELD_LOCKS.reset(holding)


@contextlib.contextmanager
def _lock_of(url: str) -> Iterator[None]:
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        # GET_LOCK names are the server's, 64 characters at most: the database's name hashed,
        # so two databases whose long names share a start do not share a lock.
        database = hashlib.sha256((parsed.database or "").encode()).hexdigest()[:40]
        with _named_lock(url, f"durable_ops.migrate.{database}"):
            yield
    elif parsed.database and parsed.database != ":memory:":
        prepare_sqlite_file(Path(parsed.database))  # its folder, made private, holds the lock
        with _file_lock(Path(f"{parsed.database}-migrate.lock")):
            yield
    else:
        yield  # a database in memory is this process's alone


@contextlib.contextmanager
def _named_lock(url: str, name: str) -> Iterator[None]:
    engine = create_db_engine(url, pool_size=1)
    try:
        with engine.connect() as connection:
            if on_galera(connection):
                yield
                return
            bound = {"name": name}
            taking = text("SELECT GET_LOCK(:name, :seconds)")
            if connection.execute(taking, {**bound, "seconds": 0}).scalar() != 1:
                _waiting(name)
                wait = {**bound, "seconds": MIGRATION_LOCK_WAIT_SECONDS}
                if connection.execute(taking, wait).scalar() != 1:
                    raise _locked()
            try:
                yield
            finally:
                connection.execute(text("SELECT RELEASE_LOCK(:name)"), bound)
    finally:
        engine.dispose()


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    # The file stays: deleting a lock file races with the next taker (as ``stack.lock``).
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, FILE_MODE)
    try:
        deadline = time.monotonic() + MIGRATION_LOCK_WAIT_SECONDS
        waiting = False
        while True:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise _locked() from None
                if not waiting:
                    _waiting(str(path))
                    waiting = True
                time.sleep(LOCK_POLL_SECONDS)
        yield
    finally:
        os.close(descriptor)  # and the lock with it


def _waiting(lock: str) -> None:
    log.warning(
        "migration_waiting",
        lock=lock,
        wait_seconds=MIGRATION_LOCK_WAIT_SECONDS,
        say="another migration of this database is running: waiting for it to end",
    )


def _locked() -> MigrationLocked:
    return MigrationLocked(
        f"another migration has held its migration lock for {MIGRATION_LOCK_WAIT_SECONDS:g} s;"
        " try again once it ends"
    )


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
    if _up_to(url, revision, script_location):
        return  # the common case, at head: no lock, no Alembic to load
    with migration_lock(url):
        # Asked again: what another process moved while this one waited may be all of it.
        if _up_to(url, revision, script_location):
            return
        from alembic import command

        command.upgrade(alembic_config(url, script_location=script_location), revision)


def _up_to(url: str, revision: str, script_location: Path) -> bool:
    """Whether an upgrade to ``revision`` has nothing to do: the database is at head (read
    without Alembic), or at a revision a newer release wrote."""
    current = stamped_revision(url)  # its engine makes the SQLite file and its folder, private
    if revision == "head" and script_location == MIGRATIONS and _at_quick_head(current):
        return True
    return _newer_than_code(current, revision, script_location)


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

    with migration_lock(url):
        command.downgrade(alembic_config(url, script_location=script_location), revision)


def migrate_to(url: str, revision: str) -> None:
    """Upgrade or downgrade, whichever reaches ``revision`` (``base`` drops everything)."""
    with migration_lock(url):
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


def pending_revisions(url: str) -> tuple[str | None, str, list[tuple[str, str]]]:
    """What ``opsctl migrate --check`` says, changing nothing: the revision stamped in the
    database (None: empty; a SQLite file that does not exist is read so, not made),
    the head, and the revisions an upgrade would apply, oldest first, each with what it
    adds (none for a database a newer release wrote: this release runs on it)."""
    parsed = make_url(url)
    missing = parsed.get_backend_name() == "sqlite" and not (
        parsed.database and parsed.database != ":memory:" and Path(parsed.database).exists()
    )
    current = None if missing else stamped_revision(url)
    return current, *revisions_ahead(current)


def revisions_ahead(current: str | None) -> tuple[str, list[tuple[str, str]]]:
    """The head, and the revisions an upgrade from ``current`` would apply, as
    ``pending_revisions`` gives them, for a revision already read."""
    head = head_revision()
    if current is not None and not _known(current):
        return head, []
    ahead = _scripts().iterate_revisions(head, current or "base")  # head first, current excluded
    return head, [(rev.revision, " ".join(rev.doc.split())) for rev in ahead][::-1]


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
