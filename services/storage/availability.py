"""Whether the database answers: the wait at start, and the readiness health follows.

A database that is away is an expected state, not a crash (ADR 16):

- ``wait_for_database`` asks (``SELECT 1``) until the database answers, with
  the backoff of ``model.availability``, writing one ``database_unreachable``
  line per failed attempt. It raises ``DatabaseUnavailable`` once
  ``OPS_DATABASE_WAIT_SECONDS`` have passed, or at once when the database
  answers but refuses us (a wrong password, no such database: waiting would
  not cure it). ``open_when_reachable`` then checks the schema, as services
  always did at start.
- ``reaching`` is around a command's single visit (``opsctl migrate``, ``users
  set-plan``…: no wait, since a person is waiting) and a service's whole life: it
  refuses a URL of a kind this product cannot use before any connection, and makes
  each failure one line naming the database and where its URL came from.
- ``DatabaseReadiness`` answers "does the database answer?" for the gRPC
  health service, from an answer at most ``READING_MAX_AGE_SECONDS`` old, so
  probes do not hammer the database; it logs each change, not each probe.

Only ``Database.engine`` is used: the transactions and their error mapping
(``Unavailable(code="database_unavailable")``) stay in ``storage.db``.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import Callable, Iterator

import structlog
from sqlalchemy import text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, OperationalError

from durable_ops.model.availability import is_fresh, next_attempt_in
from durable_ops.model.errors import Unavailable
from durable_ops.model.lifecycle import system_draw
from durable_ops.settings import SettingsError
from durable_ops.storage.db import UNREACHABLE_MYSQL_ERRORS, Database, mysql_code
from durable_ops.storage.migrate import MigrationLocked, SchemaNotCurrent, require_current

log = structlog.get_logger(__name__)

# Worth waiting for at start besides an unreachable server: "too many connections", and a
# Galera node not (yet) in the primary component.
BUSY_MYSQL_ERRORS = frozenset({1040, 1047})
# How long a health check waits for a probe in flight; a slower database is not serving.
PROBE_ANSWER_SECONDS = 1.0


class DatabaseUnavailable(RuntimeError):
    """The database did not answer (within the wait at start), or refused us: ``failure``
    says how, after "the database" and ``database``, its name and where its URL came
    from once known (``reaching``)."""

    def __init__(self, failure: str, database: str = "") -> None:
        super().__init__(" ".join(part for part in ("the database", database, failure) if part))
        self.failure = failure


def ping(db: Database) -> None:
    """One ``SELECT 1`` on a pooled connection; raises what the driver raises. A pooled
    connection the server dropped (a restart, a ``KILL``) is asked no more, and the
    question is asked once more on a fresh one: the pool pings only a connection idle
    for a while (``pool``), and one dead connection said "database unreachable" of a
    database that answered."""
    try:
        _select_one(db)
    except DBAPIError as error:
        if not error.connection_invalidated:
            raise
        _select_one(db)


def _select_one(db: Database) -> None:
    with db.engine.connect() as connection:
        connection.execute(text("SELECT 1"))


def worth_waiting_for(error: BaseException) -> bool:
    """Whether ``error`` says the database is away (it may come back), not that it refuses us."""
    if not isinstance(error, OperationalError):
        return False
    if isinstance(error.orig, sqlite3.OperationalError):
        return True  # the file cannot be opened (its disk is away): nothing else fails SELECT 1
    return mysql_code(error) in UNREACHABLE_MYSQL_ERRORS | BUSY_MYSQL_ERRORS


def describe(error: BaseException) -> str:
    """The driver's words for ``error``, on one line."""
    original = error.orig if isinstance(error, DBAPIError) else error
    words = " ".join(str(original).split()) or type(original).__name__
    return words if len(words) <= 300 else words[:299] + "…"


async def wait_for_database(db: Database, bound_seconds: float) -> None:
    """Ask until the database answers.

    Raises ``DatabaseUnavailable`` when ``bound_seconds`` have passed (every
    failed attempt is one log line, the last included) or when the database
    refuses us. An attempt that hangs is abandoned at the bound.
    """
    started = time.monotonic()
    failures = 0
    while True:
        budget = max(bound_seconds - (time.monotonic() - started), PROBE_ANSWER_SECONDS)
        try:
            await asyncio.wait_for(asyncio.to_thread(ping, db), budget)
        except DBAPIError as error:
            reason = describe(error)
            if not worth_waiting_for(error):
                raise DatabaseUnavailable(f"refused us: {reason}") from error
        except TimeoutError:
            reason = f"no answer within {budget:g} s"
        else:
            if failures:
                log.info(
                    "database_reachable",
                    attempts=failures + 1,
                    waited_seconds=round(time.monotonic() - started, 3),
                )
            return
        failures += 1
        pause = next_attempt_in(failures, time.monotonic() - started, bound_seconds, system_draw)
        log.warning(
            "database_unreachable",
            attempt=failures,
            error=reason,
            retry_in_seconds=None if pause is None else round(pause, 3),
            wait_seconds=bound_seconds,
        )
        if pause is None:
            attempts = "1 attempt" if failures == 1 else f"{failures} attempts"
            raise DatabaseUnavailable(
                f"did not answer within {bound_seconds:g} s"
                f" (OPS_DATABASE_WAIT_SECONDS; {attempts}, the last: {reason})"
            )
        await asyncio.sleep(pause)


async def open_when_reachable(db: Database, bound_seconds: float) -> None:
    """What a service does before it serves: wait for the database, then check its schema.

    ``SchemaNotCurrent`` (``storage.migrate``) when the schema is behind this code.
    """
    await wait_for_database(db, bound_seconds)
    await asyncio.to_thread(require_current, db.engine)


@contextlib.contextmanager
def reaching(url: str, source: str) -> Iterator[None]:
    """Around a command's or a service's work on the database at ``url``, which came from
    ``source`` (``--database-url``, ``OPS_DATABASE_URL``, …): each failure becomes one
    line naming both. A URL this product cannot use is a ``SettingsError``, before any
    connection; a database that does not answer, or refuses us, or that another process
    migrates for longer than the migration lock's wait, ``DatabaseUnavailable``; a schema
    behind this code ``SchemaNotCurrent``."""
    database = f"{shown_url(url, source)} (from {source})"
    try:
        yield
    except OperationalError as error:
        how = "did not answer" if worth_waiting_for(error) else "refused us"
        raise DatabaseUnavailable(f"{how}: {describe(error)}", database) from error
    except DatabaseUnavailable as away:  # a service's wait at start, which knew no name
        raise DatabaseUnavailable(away.failure, database) from away
    except Unavailable as away:  # what Database.run makes of a connection lost or refused
        if away.code != "database_unavailable":
            raise
        cause = away.__cause__
        if isinstance(cause, OperationalError) and not worth_waiting_for(cause):
            raise DatabaseUnavailable(f"refused us: {describe(cause)}", database) from away
        raise DatabaseUnavailable(f"did not answer: {away.message}", database) from away
    except MigrationLocked as busy:
        raise DatabaseUnavailable(f"is busy: {busy}", database) from busy
    except SchemaNotCurrent as behind:
        raise SchemaNotCurrent(f"the database {database}: {behind}") from behind


# The URLs this product runs on: SQLite, and MariaDB through PyMySQL, the one driver it
# ships. SQLAlchemy knows many more schemes, whose drivers are not installed (``mysql://``
# means MySQLdb) or whose SQL the revisions and queries were never written for.
SUPPORTED_SCHEMES = frozenset({"sqlite", "sqlite+pysqlite", "mysql+pymysql", "mariadb+pymysql"})
SUPPORTED_URLS = (
    "sqlite:///PATH, mysql+pymysql://USER:PASSWORD@HOST:PORT/DATABASE or mariadb+pymysql://…"
)


# What a MariaDB URL's query may set: PyMySQL's own connection options, and the TLS ones
# SQLAlchemy's MySQL dialect gathers into PyMySQL's ``ssl``; any other failed the first
# connection with a TypeError and a traceback.
_SQLALCHEMY_SSL_OPTIONS = frozenset({"ssl_capath", "ssl_cipher", "ssl_check_hostname"})


def shown_url(url: str, source: str) -> str:
    """``url`` as it may be printed: no password, and no query (which may hold one); a
    ``SettingsError`` unless durable-ops can use it (``SUPPORTED_SCHEMES``, a SQLite path,
    options the driver knows). The URL itself is never repeated then: it may hold a
    password, even where a parse error would quote it."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):  # ValueError: a port that is not a number
        why = "it does not parse as a URL; @, : and / in a password must be %-encoded"
    else:
        why = _unusable(parsed)
    if why:
        raise SettingsError(
            f"{source} is not a database URL durable-ops can use ({why}): give {SUPPORTED_URLS}"
        ) from None
    return parsed.set(query={}).render_as_string(hide_password=True)


def _unusable(parsed: URL) -> str:
    """Why durable-ops cannot run on ``parsed`` ("" when it can), never quoting a value."""
    if parsed.drivername not in SUPPORTED_SCHEMES:
        return f"{parsed.drivername}://"
    if parsed.get_backend_name() == "sqlite":
        return "a SQLite URL has three slashes and no host: sqlite:///PATH" if parsed.host else ""
    import inspect

    import pymysql

    known = set(inspect.signature(pymysql.connections.Connection).parameters)
    unknown = sorted(set(parsed.query) - known - _SQLALCHEMY_SSL_OPTIONS)
    return f"options its driver does not know: {', '.join(unknown)}" if unknown else ""


class DatabaseReadiness:
    """``await readiness()``: whether the database answers, from an answer under a second old.

    At most one probe runs at a time; checks that come while it runs wait for
    it (up to ``answer_within``, then they answer False). A probe that hangs
    keeps the answer False until it ends: a database that does not answer a
    ``SELECT 1`` does not answer the service's own queries either.
    """

    def __init__(
        self,
        db: Database,
        *,
        answer_within: float = PROBE_ANSWER_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
        probe: Callable[[Database], None] = ping,
    ) -> None:
        self._db = db
        self._answer_within = answer_within
        self._monotonic = monotonic
        self._probe = probe
        self._reachable: bool | None = None  # no answer yet
        self._read_at: float | None = None
        self._reading: asyncio.Task[bool] | None = None

    async def __call__(self) -> bool:
        if self._reachable is not None and is_fresh(self._read_at, self._monotonic()):
            return self._reachable
        if self._reading is None:
            self._reading = asyncio.create_task(self._read())
        try:
            return await asyncio.wait_for(asyncio.shield(self._reading), self._answer_within)
        except TimeoutError:
            return False

    async def _read(self) -> bool:
        error = ""
        try:
            await asyncio.to_thread(self._probe, self._db)
        except Exception as exc:  # whatever fails SELECT 1 fails the service's work too
            error = describe(exc)
        reachable = not error
        if not reachable and self._reachable is not False:
            log.warning("database_unreachable", error=error)
        elif reachable and self._reachable is False:
            log.info("database_reachable")
        self._reachable, self._read_at, self._reading = reachable, self._monotonic(), None
        return reachable
