"""Tell open heartbeat streams, within a fraction of a second, that their owner cancelled.

A stream registers the operation its lease is for; a cancel committed on this
replica wakes it at once (``cancelled``), one on another replica is found by
the shared query (``storage.operations.cancels_among``). Each stream is woken once.
"""

from __future__ import annotations

from durable_ops.operations.row_watch import RowWatch
from durable_ops.storage import operations
from durable_ops.storage.db import Database


class CancelWatch(RowWatch):
    def __init__(self, db: Database, interval_seconds: float) -> None:
        super().__init__("cancel_watch", db, interval_seconds, operations.cancels_among)

    def cancelled(self, operation_id: str) -> None:
        self.wake(operation_id)
