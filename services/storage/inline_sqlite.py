"""Short SQLite transactions run on the calling thread, never waiting for a lock.

An async server hands each transaction to the database thread pool. On SQLite
that costs more than the hop: the driver releases the GIL at every step, so
the event loop's thread and a pool thread pass it back and forth about twice
per statement, which measured as half of the Operations server's CPU per
lifecycle (ADR 0030): figure 1 on SQLite (target 0.3) went from 0.14 to 0.28
with this module, the one bypass under SQLAlchemy a user-facing figure needs.
A transaction marked short (a create, a claim, a settle, a heartbeat, a read
by id) runs here instead, on one connection kept open for it (checking a
connection out and in again cost a third of a create's transaction), when it
can start at once:

- the connection's ``busy_timeout`` is 0, so a write lock held by another
  connection or process answers SQLITE_BUSY at ``BEGIN IMMEDIATE`` instead of
  stalling the loop; the caller then runs the transaction on the pool, whose
  connections wait for the lock as before;
- the connection serves one transaction at a time: a second thread finding it
  taken goes to the pool as well;
- nothing here sleeps, and the connection never checkpoints the WAL itself
  (``wal_autocheckpoint=0``): a checkpoint writes and syncs the database file,
  so every ``CHECKPOINT_EVERY`` commits one is asked of the pool instead.

A transaction refused here has done nothing: SQLite rolled it back, and the
pool replays it whole, as a deadlock victim is replayed on MariaDB.

Any other failure goes to the caller, and the connection is never left in a
transaction: a COMMIT that failed (a full disk) leaves SQLAlchemy's transaction
attached to the connection, which would refuse every later ``begin()``, so
such a connection, or one a disk or I/O error struck, is dropped (closing it
rolls back what SQLite held open) and the next transaction opens another.
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from sqlalchemy import Engine
from sqlalchemy.engine import Connection
from sqlalchemy.exc import OperationalError

from durable_ops.storage.pool import in_transaction

T = TypeVar("T")

SQLITE_BUSY = 5
SQLITE_LOCKED = 6
# Write commits between two WAL checkpoints asked of the pool: sqlite's own default
# checkpoints at 1,000 pages, and a short transaction writes a few pages.
CHECKPOINT_EVERY = 200


def sqlite_code(exc: OperationalError) -> int | None:
    """SQLite's primary result code behind ``exc`` (its extended code's low byte), if any."""
    code = getattr(exc.orig, "sqlite_errorcode", None)  # sqlite3.Error's, since Python 3.11
    return code & 0xFF if isinstance(code, int) else None


def is_busy(exc: OperationalError) -> bool:
    """Whether SQLite refused for a lock held elsewhere (any extended BUSY or LOCKED code)."""
    return sqlite_code(exc) in (SQLITE_BUSY, SQLITE_LOCKED)


@dataclass(frozen=True)
class Ran(Generic[T]):
    """A transaction that ran here, and what it answered."""

    result: T


class InlineSqlite:
    """One connection's worth of transactions that start at once or not at all."""

    def __init__(self, engine: Engine, checkpoint: Callable[[], None]) -> None:
        """``engine`` holds the one connection (busy_timeout 0, no autocheckpoint);
        ``checkpoint`` asks for a WAL checkpoint elsewhere and returns at once."""
        self.engine = engine
        self._connection: Connection | None = None  # opened at the first transaction
        self._checkpoint = checkpoint
        self._taken = threading.Lock()
        self._writes = 0
        # How short transactions went: "inline", or sent to the pool as "busy" or "taken".
        self.outcomes: Counter[str] = Counter()

    def try_run(self, attempt: Callable[[Connection], T], *, write: bool) -> Ran[T] | None:
        """``attempt`` run on this thread, given the connection (whose transactions begin
        IMMEDIATE for a write), or None when it must go to the pool instead: the
        connection is taken, or SQLite is busy, and then it has changed nothing."""
        if not self._taken.acquire(blocking=False):
            self.outcomes["taken"] += 1
            return None
        try:
            if self._connection is None:
                self._connection = self.engine.connect()
            connection = self._connection.execution_options(
                sqlite_begin="IMMEDIATE" if write else "DEFERRED"
            )
            try:
                result = attempt(connection)
            except BaseException as exc:
                busy = isinstance(exc, OperationalError) and is_busy(exc)
                # A COMMIT that failed leaves the connection marked as in a transaction
                # (and SQLite may still hold it open); a disk or I/O error may leave it
                # broken: either way the next transaction gets a fresh connection.
                if (isinstance(exc, OperationalError) and not busy) or not _settled(connection):
                    self._discard(connection)
                if not busy:
                    raise
                self.outcomes["busy"] += 1
                return None
            self.outcomes["inline"] += 1
            if write:
                self._writes = (self._writes + 1) % CHECKPOINT_EVERY
                if self._writes == 0:
                    self._checkpoint()
            return Ran(result)
        finally:
            self._taken.release()

    def _discard(self, connection: Connection) -> None:
        """Drop the connection, rolling back whatever it held open (closing a SQLite
        connection does); the next transaction opens another."""
        self._connection = None
        with contextlib.suppress(Exception):
            connection.invalidate()  # closes the driver's connection: no reset of it asked
        with contextlib.suppress(Exception):
            connection.close()

    def close(self) -> None:
        """Close the connection and the engine; a later transaction opens them again."""
        with self._taken:
            if self._connection is not None:
                self._connection.close()
                self._connection = None
        self.engine.dispose()


def _settled(connection: Connection) -> bool:
    """Whether ``connection`` is in no transaction, for SQLAlchemy and for SQLite."""
    try:
        return connection.get_transaction() is None and not in_transaction(
            connection.connection.dbapi_connection
        )
    except Exception:  # closed or invalidated: not one to use again
        return False
