"""Engines, transactions and the two scopes every query runs in.

``Database.run(work, owner_id=...)`` runs ``work`` in one Core transaction
(a ``durable_ops.storage.tx.Tx``): in the owner scope of ``owner_id``, where
a statement on an owner-bearing table must filter by ``SCOPE_OWNER`` and the
scope supplies the owner, or, with ``owner_id=None``, in the neutral scope of
claims, the sweeper and admin. It is the one way every service reaches the
database (ADR 0008).

Writers retry the whole transaction on MariaDB deadlocks (1213, which Galera
also raises at COMMIT when certification refuses a conflicting write set),
lock-wait timeouts (1205) and a Galera node that is not ready yet (1047),
after a fully jittered pause (``transaction_retry_pause``); on SQLite they
take the write lock up front (``BEGIN IMMEDIATE``) so two writers never
deadlock upgrading a read lock.

A COMMIT whose connection is lost (2013 and the other unreachable codes) may
or may not have committed. The work of a transaction says how to tell with
``on_unknown_commit(check)``: after such a COMMIT the check runs in a fresh
transaction and answers whether this transaction's writes are there. Found,
the attempt's result is returned; not found, the transaction never happened
and is replayed. Work that registered no check gets ``Unavailable`` as for
any unreachable database (ADR 0017). In the same way the work says what it
changed (``events.publish``); what a committed attempt said is delivered to
``Database.events`` after COMMIT, by the async runners.

On SQLite, a full disk (SQLITE_FULL, also a file capped by ``max_page_count``)
or an I/O error is ``Unavailable`` (``database_unavailable``), as an unreachable
server is: nothing was written, the caller may retry once space is back. It is
logged as one line (``database_disk_full``, ``database_io_error``) per minute at
most, with how many more failed meanwhile, instead of a stack trace per call.

On a Galera node (``wsrep_on``) every session sets ``wsrep_sync_wait`` so a
read sees every write the cluster committed before it, whichever node took it.

Async servers run transactions on a thread pool (``run_async``). On SQLite
a transaction marked ``short`` runs on the event loop's thread instead, on a
connection that never waits for a lock, and falls back to the pool when it
cannot start at once (``inline_sqlite``, ADR 0030).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, TypeVar, cast

import sqlalchemy
import structlog
from sqlalchemy import Engine, event
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import StaticPool

from durable_ops.model.errors import Unavailable
from durable_ops.model.lifecycle import Draw, system_draw
from durable_ops.private_files import prepare_sqlite_file
from durable_ops.storage import pool
from durable_ops.storage.events import Bus, Committed, collecting
from durable_ops.storage.inline_sqlite import InlineSqlite, is_busy, sqlite_code
from durable_ops.storage.tx import Tx

log = structlog.get_logger(__name__)
T = TypeVar("T")

# 1205 lock wait timeout; 1213 deadlock, or (Galera) a write set that lost certification,
# raised at any statement or at COMMIT; 1047 a Galera node not (yet) in the primary component.
RETRYABLE_MYSQL_ERRORS = frozenset({1047, 1205, 1213})
# The server is away (cannot connect, gone, lost mid-query, shutting down), or (1180, a
# Galera node) left the primary component during the COMMIT: an expected state the caller
# may retry, not a fault of ours. A COMMIT lost this way may have committed (a write set
# in flight when the node left may still be applied by the others): the transaction's
# own check (``on_unknown_commit``) tells which.
UNREACHABLE_MYSQL_ERRORS = frozenset({1053, 1180, 2002, 2003, 2006, 2013, 2055})
# The server answers a new connection but lets us in no more: access denied (1044, 1045,
# 1698), the account locked (4151), the database gone (1049). At start a refusal
# (``availability``); once running, the database is away for the caller as in an outage
# (UNAVAILABLE), not an unforeseen fault logged with a stack trace per call.
REFUSING_MYSQL_ERRORS = frozenset({1044, 1045, 1049, 1698, 4151})
MAX_TRANSACTION_ATTEMPTS = 8
TRANSACTION_RETRY_BASE_SECONDS = 0.002
TRANSACTION_RETRY_MAX_SECONDS = 0.2
TRANSACTION_RETRY_JITTER: Draw = system_draw  # the random source of the replay's pause
# Reading back whether a lost COMMIT committed: a few tries, about 1.5 s in all.
COMMIT_CHECK_ATTEMPTS = 6
COMMIT_CHECK_FIRST_PAUSE_SECONDS = 0.05
# wsrep_sync_wait on Galera sessions: a transaction's first statement waits until the node
# has applied every write set the cluster ordered before it (read-your-writes anywhere).
# Galera waits only at the first statement, and only for the kinds the mask names: 1 reads,
# 2 UPDATE/DELETE, 4 INSERT/REPLACE. A completion begins with its guarded UPDATE, so reads
# alone let it miss the claim another node just committed.
GALERA_SYNC_WAIT = 1 | 2 | 4
GALERA_KEY = "galera"  # in a pooled connection's info: the server is a Galera node
# SQLite's primary codes for the storage under the database failing: an I/O error, and a
# full disk (or a file at its max_page_count). The transaction did not commit.
SQLITE_IOERR = 10
SQLITE_FULL = 13
# What each says, to the caller and in the log (one line per fault and per minute at most).
STORAGE_FAULTS = {
    SQLITE_FULL: (
        "database_disk_full",
        "the database's disk is full; try again once space is freed",
    ),
    SQLITE_IOERR: (
        "database_io_error",
        "the database's disk failed a read or write; try again",
    ),
}
STORAGE_FAULT_LOG_EVERY_SECONDS = 60.0

CommitCheck = Callable[[Tx], bool]
_COMMIT_CHECKS: contextvars.ContextVar[list[CommitCheck] | None] = contextvars.ContextVar(
    "durable_ops_commit_checks", default=None
)


def on_unknown_commit(check: CommitCheck) -> None:
    """Say, from inside a transaction's work, how to tell later whether it committed.

    ``check`` runs only if the COMMIT's connection is lost, in a fresh read
    transaction of the same scope, and must answer True only when this
    transaction's writes are there (a lease token hash, a freshly drawn id, an
    exact ``updated_at``). Outside ``Database.run`` it is ignored.
    """
    checks = _COMMIT_CHECKS.get()
    if checks is not None:
        checks.append(check)


def on_galera(connection: Connection) -> bool:
    """Whether this connection's server is a Galera node (detected when it connected)."""
    return bool(connection.info.get(GALERA_KEY))


class _CommitLost(Exception):
    """The connection was lost during COMMIT: the outcome is unknown; the result, and what
    the work said it changed, are here."""

    def __init__(self, result: object, said: list[Committed], cause: OperationalError) -> None:
        super().__init__("the connection was lost during COMMIT")
        self.result = result
        self.said = said
        self.cause = cause


def _unavailable() -> Unavailable:
    return Unavailable("the database cannot be reached; try again", code="database_unavailable")


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
    event.listen(engine, "connect", _on_mysql_connect)
    return engine


def _on_mysql_connect(dbapi_connection: Any, record: Any) -> None:
    """Detect Galera once per connection and make its reads causal (``wsrep_sync_wait``)."""
    with dbapi_connection.cursor() as cursor:
        cursor.execute("SHOW VARIABLES LIKE 'wsrep_on'")
        row = cursor.fetchone()
        galera = row is not None and str(row[1]).upper() == "ON"
        if galera:
            cursor.execute(f"SET SESSION wsrep_sync_wait = {GALERA_SYNC_WAIT}")
    record.info[GALERA_KEY] = galera


def _sqlite_engine(url: URL, *, inline: bool = False) -> Engine:
    """The pool's engine, whose connections wait up to 30 s for a lock; or, ``inline``,
    the engine of one connection that never waits nor checkpoints (``inline_sqlite``)."""
    if url.database and url.database != ":memory:":
        prepare_sqlite_file(Path(url.database))  # before SQLite makes it readable by all
    engine = sqlalchemy.create_engine(
        url,
        pool_reset_on_return=None,
        # The driver's timeout is the connection's busy_timeout (0: never wait for a lock).
        connect_args={"timeout": 0 if inline else 30, "check_same_thread": False},
        **({"poolclass": StaticPool} if inline else {}),
    )
    pool.install(engine, ping=False)
    pragmas = ["journal_mode=WAL", "synchronous=NORMAL", "foreign_keys=ON"]
    if inline:
        pragmas.append("wal_autocheckpoint=0")

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy, not pysqlite, issue BEGIN so writers can BEGIN IMMEDIATE.
        dbapi_connection.isolation_level = None
        for pragma in pragmas:
            dbapi_connection.execute(f"PRAGMA {pragma}").close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        mode = connection.get_execution_options().get("sqlite_begin", "DEFERRED")
        connection.exec_driver_sql(f"BEGIN {mode}")

    return engine


def mysql_code(exc: OperationalError) -> object:
    return exc.orig.args[0] if exc.orig is not None and exc.orig.args else None


def _transaction(
    connection: Connection, work: Callable[[Tx], T], owner_id: str | None, said: list[Committed]
) -> T:
    """One try of a transaction on ``connection``; once it committed, what it said it
    changed goes to ``said``. Its COMMIT is inside, so a 1213 there is replayed, and a
    COMMIT whose connection is lost is ``_CommitLost`` (outcome unknown)."""
    if owner_id == "":
        raise ValueError("an owner scope needs an owner id")
    with collecting() as changes, connection.begin() as transaction:
        result = work(Tx(connection, owner_id))
        try:
            transaction.commit()
        except OperationalError as exc:
            if mysql_code(exc) in UNREACHABLE_MYSQL_ERRORS:
                raise _CommitLost(result, changes, exc) from exc
            raise
    said.extend(changes)
    return result


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


class Database:
    """One engine and the scoped transactions over it."""

    def __init__(self, url: str, *, pool_size: int = 10) -> None:
        self.url = url
        self.engine = create_db_engine(url, pool_size=pool_size)
        self.dialect = self.engine.dialect.name
        self.is_sqlite = self.dialect == "sqlite"
        # SQLite writers take the write lock at BEGIN (see _sqlite_engine).
        self._writer = (
            self.engine.execution_options(sqlite_begin="IMMEDIATE")
            if self.is_sqlite
            else self.engine
        )
        # Async servers run blocking transactions here; sized to the connection pool so
        # a burst queues for a thread instead of for a connection inside a thread.
        self._executor = ThreadPoolExecutor(max_workers=pool_size, thread_name_prefix="db")
        # Replayed attempts by MySQL error code, and lost COMMITs by outcome: figures for
        # benchmarks and drills (``retries[1213]`` per claim, ``lost_commits["committed"]``).
        self.events = Bus()  # what committed transactions changed, for this process's waiters
        self.retries: Counter[int] = Counter()
        self.lost_commits: Counter[str] = Counter()
        self._counting = threading.Lock()
        # SQLite storage faults by log event: when last logged, how many since.
        self._fault_logged_at: dict[str, float] = {}
        self._faults_unlogged: Counter[str] = Counter()
        # SQLite: short transactions of async servers run on the loop's thread when they
        # can start at once (ADR 0030). An in-memory database is one per connection.
        self.checkpoints = 0  # WAL checkpoints asked of the pool for the inline connection
        self._checkpointing: Future[None] | None = None
        self.inline = (
            InlineSqlite(_sqlite_engine(self.engine.url, inline=True), self._checkpoint_soon)
            if self.is_sqlite and self.engine.url.database not in (None, "", ":memory:")
            else None
        )

    @property
    def engines(self) -> tuple[Engine, ...]:
        """Every engine statements go through: the pool's and, on SQLite, the inline one."""
        return (self.engine,) if self.inline is None else (self.engine, self.inline.engine)

    def listen(self, name: str, listener: Callable[..., Any]) -> None:
        """``event.listen`` on every engine (statement counters, recorders)."""
        for engine in self.engines:
            event.listen(engine, name, listener)

    def unlisten(self, name: str, listener: Callable[..., Any]) -> None:
        for engine in self.engines:
            event.remove(engine, name, listener)

    def run(
        self,
        work: Callable[[Tx], T],
        *,
        owner_id: str | None,
        write: bool = True,
        said: list[Committed] | None = None,
    ) -> T:
        """Run ``work`` in one transaction in the given scope, retrying on deadlock;
        what its committed attempt said it changed goes to ``said``."""
        engine = self._writer if write else self.engine
        said = [] if said is None else said
        for number in range(1, MAX_TRANSACTION_ATTEMPTS + 1):
            checks: list[CommitCheck] = []
            scope = _COMMIT_CHECKS.set(checks)
            try:
                with engine.connect() as connection:
                    result = _transaction(connection, work, owner_id, said)
            except _CommitLost as lost:
                if not checks:
                    raise _unavailable() from lost.cause
                landed = self._committed(list(checks), owner_id)
                with self._counting:
                    self.lost_commits["committed" if landed else "not_committed"] += 1
                if not landed:
                    if number == MAX_TRANSACTION_ATTEMPTS:
                        raise _unavailable() from lost.cause
                    log.info("commit_lost_replayed", attempt=number)  # it never happened
                    continue
                log.info("commit_lost_but_committed", attempt=number)
                said.extend(lost.said)
                result = cast(T, lost.result)
            except OperationalError as exc:
                if mysql_code(exc) in UNREACHABLE_MYSQL_ERRORS:
                    raise _unavailable() from exc
                if mysql_code(exc) in REFUSING_MYSQL_ERRORS:
                    raise Unavailable(
                        "the database refused our connection; try again",
                        code="database_unavailable",
                    ) from exc
                if (refusal := self._storage_fault(exc)) is not None:
                    raise refusal from exc
                if self.is_sqlite and is_busy(exc):
                    # Another process held the lock past the busy timeout (a backup, a shell
                    # left in a transaction): contention, as MariaDB's lock waits are, which
                    # the caller may retry; not a fault to answer INTERNAL with a stack trace.
                    raise Unavailable(
                        "the database stayed locked by another connection; try again",
                        code="database_busy",
                    ) from exc
                if mysql_code(exc) not in RETRYABLE_MYSQL_ERRORS:
                    raise
                if number == MAX_TRANSACTION_ATTEMPTS:  # transient still: the caller may retry
                    raise Unavailable(
                        "the database kept refusing this transaction under contention; try again",
                        code="database_busy",
                    ) from exc
                code = cast(int, mysql_code(exc))
                with self._counting:
                    self.retries[code] += 1
                log.info("transaction_retry", attempt=number, code=code)
                time.sleep(transaction_retry_pause(number, TRANSACTION_RETRY_JITTER))
                continue
            finally:
                _COMMIT_CHECKS.reset(scope)
            return result
        raise AssertionError("unreachable")

    def _committed(self, checks: list[CommitCheck], owner_id: str | None) -> bool:
        """Whether a transaction whose COMMIT was lost committed: its checks, read afresh.

        On Galera the read is causal (``wsrep_sync_wait``): a write set the lost
        node had replicated is applied, or known never to come, before it answers.
        """
        for number in range(1, COMMIT_CHECK_ATTEMPTS + 1):
            try:
                with self.engine.connect() as connection:  # closing it rolls back: it only read
                    return any(check(Tx(connection, owner_id)) for check in checks)
            except OperationalError as exc:
                if mysql_code(exc) not in UNREACHABLE_MYSQL_ERRORS | RETRYABLE_MYSQL_ERRORS:
                    raise
                if number == COMMIT_CHECK_ATTEMPTS:
                    raise Unavailable(
                        "the database was lost during a commit whose outcome cannot be"
                        " read back yet; try again",
                        code="database_unavailable",
                    ) from exc
                time.sleep(COMMIT_CHECK_FIRST_PAUSE_SECONDS * 2 ** (number - 1))
        raise AssertionError("unreachable")

    async def run_async(
        self,
        work: Callable[[Tx], T],
        *,
        owner_id: str | None,
        write: bool = True,
        short: bool = False,
    ) -> T:
        """``run`` on the database thread pool, for async servers; then what it
        changed goes to ``events``, on the loop's thread.

        ``short``: a transaction of a few statements over rows named by key (a create,
        a claim, a settle, a heartbeat, a read by id). On SQLite it runs on the loop's
        own thread when it can start at once (``inline_sqlite``), else on the pool.
        """
        said: list[Committed] = []
        if short and self.inline is not None:
            inline = partial(_transaction, work=work, owner_id=owner_id, said=said)
            try:
                ran = self.inline.try_run(inline, write=write)
            except OperationalError as exc:
                if (refusal := self._storage_fault(exc)) is not None:
                    raise refusal from exc
                raise
            if ran is not None:
                self.events.deliver(said)
                return ran.result
        # In the caller's context (as asyncio.to_thread does): a traced RPC's SQL
        # statements are spans of its trace, and context-bound log fields carry over.
        context = contextvars.copy_context()
        call = partial(self.run, work, owner_id=owner_id, write=write, said=said)
        result = await asyncio.get_running_loop().run_in_executor(self._executor, context.run, call)
        self.events.deliver(said)
        return result

    def _storage_fault(self, exc: OperationalError) -> Unavailable | None:
        """What a full disk or an I/O error under SQLite answers (``Unavailable``), or None
        for any other error. Logged once per fault and per minute at most, with how many
        more there were since the last line, and without a stack trace."""
        code = sqlite_code(exc) if self.is_sqlite else None
        if code not in STORAGE_FAULTS:
            return None
        event_name, message = STORAGE_FAULTS[code]
        refusal = Unavailable(message, code="database_unavailable")
        now = time.monotonic()
        with self._counting:
            last = self._fault_logged_at.get(event_name)
            if last is not None and now - last < STORAGE_FAULT_LOG_EVERY_SECONDS:
                self._faults_unlogged[event_name] += 1
                return refusal
            self._fault_logged_at[event_name] = now
            since = self._faults_unlogged.pop(event_name, 0)
        log.error(
            event_name,
            database=self.engine.url.database,
            error=str(exc.orig),
            failed_since_last_line=since,
        )
        return refusal

    def _checkpoint_soon(self) -> None:
        """A passive WAL checkpoint on the pool, for the inline connection's commits;
        none while the last one asked for is still on its way."""
        if self._checkpointing is not None and not self._checkpointing.done():
            return
        with contextlib.suppress(RuntimeError):  # disposed: the last close checkpoints
            self._checkpointing = self._executor.submit(self._checkpoint)

    def _checkpoint(self) -> None:
        try:
            with self.engine.connect() as connection:
                connection.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)")
        except OperationalError as exc:  # the next one tries again; the WAL grows meanwhile
            log.warning("wal_checkpoint_failed", error=str(exc.orig))
            return
        with self._counting:
            self.checkpoints += 1

    def dispose(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        if self.inline is not None:
            self.inline.close()
        self.engine.dispose()
