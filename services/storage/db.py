"""Engines, transactions and the two scopes every query runs in.

``Database.owner(owner_id)`` opens a transaction whose ORM queries on
owner-bearing tables are filtered by ``owner_user_id`` in one place (a
``do_orm_execute`` hook adding ``with_loader_criteria``), so a query written
without a WHERE still cannot see another owner's row, and new rows are stamped
with (and checked against) the scope's owner. ``Database.neutral()`` is the
unfiltered scope of claims and the sweeper. ``run_core`` runs a Core
transaction (``durable_ops.storage.tx``) in either scope, for the operation
lifecycle's hot statements.

Writers retry the whole transaction on MariaDB deadlocks (1213) and lock-wait
timeouts (1205), after a fully jittered pause (``transaction_retry_pause``);
on SQLite they take the write lock up front (``BEGIN IMMEDIATE``) so two
writers never deadlock upgrading a read lock.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy
import structlog
from sqlalchemy import Engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import ORMExecuteState, Session, sessionmaker, with_loader_criteria

from durable_ops.model.errors import Unavailable
from durable_ops.model.lifecycle import Draw, system_draw
from durable_ops.storage import pool
from durable_ops.storage.schema import Owned
from durable_ops.storage.tx import OWNER_KEY, Tx

log = structlog.get_logger(__name__)
T = TypeVar("T")

RETRYABLE_MYSQL_ERRORS = frozenset({1205, 1213})
# The server is away (cannot connect, gone, lost mid-query, shutting down): an expected
# state the caller may retry, not a fault of ours. A COMMIT lost this way may have
# committed; a retry is safe because every write is idempotent or lease-guarded.
UNREACHABLE_MYSQL_ERRORS = frozenset({1053, 2002, 2003, 2006, 2013, 2055})
MAX_TRANSACTION_ATTEMPTS = 8
TRANSACTION_RETRY_BASE_SECONDS = 0.002
TRANSACTION_RETRY_MAX_SECONDS = 0.2
TRANSACTION_RETRY_JITTER: Draw = system_draw  # the random source of the replay's pause


class OwnerMismatch(RuntimeError):
    """A row of another owner was added inside an owner scope: a programming error."""


def create_db_engine(url: str, *, pool_size: int = 10) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(parsed)
    # sqlalchemy.create_engine is looked up at call time: an installed SQLAlchemy
    # instrumentation (durable_ops.telemetry) wraps it, and so traces every statement.
    engine = sqlalchemy.create_engine(
        parsed,
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_recycle=3600,
        pool_reset_on_return=None,
        isolation_level="READ COMMITTED",
        connect_args={"charset": "utf8mb4"},
    )
    pool.install(engine, ping=True)
    return engine


def _sqlite_engine(url: URL) -> Engine:
    if url.database and url.database != ":memory:":
        Path(url.database).parent.mkdir(parents=True, exist_ok=True)
    engine = sqlalchemy.create_engine(
        url,
        pool_reset_on_return=None,
        connect_args={"timeout": 30, "check_same_thread": False},
    )
    pool.install(engine, ping=False)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy, not pysqlite, issue BEGIN so writers can BEGIN IMMEDIATE.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        mode = connection.get_execution_options().get("sqlite_begin", "DEFERRED")
        connection.exec_driver_sql(f"BEGIN {mode}")

    return engine


def _mysql_code(exc: OperationalError) -> object:
    return exc.orig.args[0] if exc.orig is not None and exc.orig.args else None


def _is_retryable(exc: OperationalError) -> bool:
    return _mysql_code(exc) in RETRYABLE_MYSQL_ERRORS


def _is_unreachable(exc: OperationalError) -> bool:
    return _mysql_code(exc) in UNREACHABLE_MYSQL_ERRORS


def transaction_retry_pause(number: int, draw: Draw) -> float:
    """Seconds to sleep before replaying a deadlock victim's ``number``-th attempt.

    Full jitter: uniform in [0, min(2 ms * 2**number, 200 ms)], so the victims
    of one deadlock do not replay in lockstep and collide again. Pure: ``draw``
    is the random source (a draw outside [0, 1], or NaN, is held to it).
    """
    growth: float = 2.0 ** min(max(number, 0), 16)
    ceiling = min(TRANSACTION_RETRY_BASE_SECONDS * growth, TRANSACTION_RETRY_MAX_SECONDS)
    value = draw()
    fraction = value if 0.0 <= value <= 1.0 else (1.0 if value > 1.0 else 0.0)
    return fraction * ceiling


def _scope_owner_filter(state: ORMExecuteState) -> None:
    owner = state.session.info.get(OWNER_KEY)
    if owner is None or not (state.is_select or state.is_update or state.is_delete):
        return
    state.statement = state.statement.options(
        with_loader_criteria(
            Owned,
            lambda cls: cls.owner_user_id == owner,
            include_aliases=True,
            track_closure_variables=False,
        )
    )


def _stamp_owner(session: Session, _context: Any, _instances: Any) -> None:
    owner = session.info.get(OWNER_KEY)
    if owner is None:
        return
    for obj in session.new:
        if isinstance(obj, Owned):
            if obj.owner_user_id is None:
                obj.owner_user_id = owner
            elif obj.owner_user_id != owner:
                raise OwnerMismatch(f"{type(obj).__name__} of another owner added in owner scope")


class Database:
    """One engine and the scoped transactions over it."""

    def __init__(self, url: str, *, pool_size: int = 10) -> None:
        self.url = url
        self.engine = create_db_engine(url, pool_size=pool_size)
        self.dialect = self.engine.dialect.name
        # SQLite writers take the write lock at BEGIN (see _sqlite_engine).
        self._writer = (
            self.engine.execution_options(sqlite_begin="IMMEDIATE")
            if self.dialect == "sqlite"
            else self.engine
        )
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        event.listen(self._sessions, "do_orm_execute", _scope_owner_filter)
        event.listen(self._sessions, "before_flush", _stamp_owner)
        # Async servers run blocking transactions here; sized to the connection pool so
        # a burst queues for a thread instead of for a connection inside a thread.
        self._executor = ThreadPoolExecutor(max_workers=pool_size, thread_name_prefix="db")

    @property
    def is_sqlite(self) -> bool:
        return self.dialect == "sqlite"

    @contextmanager
    def _transaction(self, owner_id: str | None, *, write: bool) -> Iterator[Session]:
        with self._sessions(bind=self._writer if write else self.engine) as session:
            if owner_id is not None:
                session.info[OWNER_KEY] = owner_id
            with session.begin():
                yield session

    @contextmanager
    def owner(self, owner_id: str, *, write: bool = True) -> Iterator[Session]:
        """A transaction in which every owner-bearing query is filtered by ``owner_id``."""
        if not owner_id:
            raise ValueError("an owner scope needs an owner id")
        with self._transaction(owner_id, write=write) as session:
            yield session

    @contextmanager
    def neutral(self, *, write: bool = True) -> Iterator[Session]:
        """An unfiltered transaction: claims, the sweeper, migrations checks, admin."""
        with self._transaction(None, write=write) as session:
            yield session

    def run(
        self,
        work: Callable[[Session], T],
        *,
        owner_id: str | None,
        write: bool = True,
    ) -> T:
        """Run ``work`` in one ORM transaction, retrying the whole of it on deadlock."""

        def attempt() -> T:
            with self._transaction(owner_id, write=write) as session:
                return work(session)

        return self._retrying(attempt)

    def run_core(
        self,
        work: Callable[[Tx], T],
        *,
        owner_id: str | None,
        write: bool = True,
    ) -> T:
        """Run ``work`` in one Core transaction in the given scope, retrying on deadlock."""
        if owner_id == "":
            raise ValueError("an owner scope needs an owner id")
        engine = self._writer if write else self.engine

        def attempt() -> T:
            with engine.begin() as connection:
                return work(Tx(connection, owner_id))

        return self._retrying(attempt)

    def _retrying(self, attempt: Callable[[], T]) -> T:
        for number in range(1, MAX_TRANSACTION_ATTEMPTS + 1):
            try:
                return attempt()
            except OperationalError as exc:
                if _is_unreachable(exc):
                    raise Unavailable(
                        "the database cannot be reached; try again", code="database_unavailable"
                    ) from exc
                if not _is_retryable(exc) or number == MAX_TRANSACTION_ATTEMPTS:
                    raise
                log.info("transaction_retry", attempt=number, error=type(exc.orig).__name__)
                time.sleep(transaction_retry_pause(number, TRANSACTION_RETRY_JITTER))
        raise AssertionError("unreachable")

    async def run_async(
        self,
        work: Callable[[Session], T],
        *,
        owner_id: str | None,
        write: bool = True,
    ) -> T:
        """``run`` on the database thread pool, for async servers."""
        call = partial(self.run, work, owner_id=owner_id, write=write)
        return await self._in_executor(call)

    async def run_core_async(
        self,
        work: Callable[[Tx], T],
        *,
        owner_id: str | None,
        write: bool = True,
    ) -> T:
        """``run_core`` on the database thread pool, for async servers."""
        call = partial(self.run_core, work, owner_id=owner_id, write=write)
        return await self._in_executor(call)

    async def _in_executor(self, call: Callable[[], T]) -> T:
        # In the caller's context (as asyncio.to_thread does): a traced RPC's SQL
        # statements are spans of its trace, and context-bound log fields carry over.
        context = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(self._executor, context.run, call)

    def dispose(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        self.engine.dispose()
