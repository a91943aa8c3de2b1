"""Connection-pool policies that keep round trips off the hot path.

SQLAlchemy's safe defaults cost two extra round trips per transaction: a ping
on every checkout (``pool_pre_ping``) and a ROLLBACK on every return, even
right after a COMMIT. Both are replaced by checks that ask the driver instead
of the server:

- a connection is pinged at checkout only when it sat idle for longer than
  ``IDLE_PING_SECONDS`` (a busy pool never pings; a connection the server
  dropped while idle is replaced before it is used);
- a connection is rolled back on return only when the driver reports that a
  transaction is still open (PyMySQL keeps the server's ``IN_TRANS`` status
  flag from its OK replies; ``sqlite3`` has ``in_transaction``).

Transactions the product opens through SQLAlchemy are ended by SQLAlchemy
(a ``Connection`` closed inside one rolls it back itself); the reset check is
the net under anything done on a raw driver connection. PyMySQL does not take
the flag from result sets, so a raw connection that only read is not seen as
open: product code never uses raw connections.
"""

from __future__ import annotations

import time
from typing import Any

from pymysql.constants import SERVER_STATUS
from sqlalchemy import Engine, event, exc
from sqlalchemy.pool import PoolResetState

IDLE_PING_SECONDS = 10.0
_LAST_RETURNED = "returned_at"


def in_transaction(dbapi_connection: Any) -> bool:
    """Whether the driver knows of an open transaction on this connection."""
    status = getattr(dbapi_connection, "server_status", None)
    if status is not None:  # PyMySQL: the status flags of the server's last reply
        return bool(status & SERVER_STATUS.SERVER_STATUS_IN_TRANS)
    return bool(getattr(dbapi_connection, "in_transaction", True))


def install(engine: Engine, *, ping: bool) -> None:
    """Rollback-only-when-open resets and, with ``ping`` (a server database),
    idle-only pings. The engine must be made with ``pool_reset_on_return=None``
    and without ``pool_pre_ping``."""

    @event.listens_for(engine, "reset")
    def _rollback_if_open(dbapi_connection: Any, _record: Any, state: PoolResetState) -> None:
        if not state.transaction_was_reset and in_transaction(dbapi_connection):
            dbapi_connection.rollback()

    if not ping:
        return

    @event.listens_for(engine, "checkin")
    def _remember_return(_dbapi_connection: Any, record: Any) -> None:
        record.info[_LAST_RETURNED] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _ping_if_idle(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        returned = record.info.get(_LAST_RETURNED)
        if returned is None or time.monotonic() - returned < IDLE_PING_SECONDS:
            return
        try:
            dbapi_connection.ping(False)
        except Exception as error:
            # The pool discards this connection and checks out (or opens) another.
            raise exc.DisconnectionError("idle connection failed its ping") from error
