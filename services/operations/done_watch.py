"""Wake ``WaitOperation`` calls once their operation is done.

Every change this replica commits to an operation wakes its waiters at once
(``changed``: they read the row again and wait on if it is not done yet); an
operation finished through another replica, or by the sweeper, is found by the
shared query (``storage.operations.finished_among``). No waiter polls alone.
"""

from __future__ import annotations

from durable_ops.operations.row_watch import RowWatch
from durable_ops.storage import operations
from durable_ops.storage.db import Database


class DoneWatch(RowWatch):
    def __init__(self, db: Database, interval_seconds: float) -> None:
        super().__init__("done_watch", db, interval_seconds, operations.finished_among)

    def changed(self, operation_id: str) -> None:
        self.wake(operation_id)
