"""What a piece of storage work reads, counted rather than timed.

On MariaDB the session's handler reads (rows and index entries), on SQLite the
virtual machine's steps (``set_progress_handler``): both grow with the rows a
statement walks and not with the machine's speed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from durable_ops.storage.db import Database
from durable_ops.storage.tx import Tx


def _handler_reads(tx: Tx) -> int:
    rows = tx.connection.exec_driver_sql("SHOW SESSION STATUS LIKE 'Handler_read%%'")
    return sum(int(value) for _, value in rows)


def reads_of(db: Database, work: Callable[[Tx], object]) -> int:
    """What ``work`` read, in the neutral scope: MariaDB's handler reads, SQLite's VM steps."""

    def measured(tx: Tx) -> int:
        if tx.connection.dialect.name == "sqlite":
            steps = [0]

            def step() -> int:
                steps[0] += 1
                return 0

            raw: Any = tx.connection.connection.driver_connection
            raw.set_progress_handler(step, 1)
            try:
                work(tx)
            finally:
                raw.set_progress_handler(None, 1)
            return steps[0]
        asking = -_handler_reads(tx) + _handler_reads(tx)  # what a look at them adds
        before = _handler_reads(tx)
        work(tx)
        return _handler_reads(tx) - before - asking

    return db.run(measured, owner_id=None)
