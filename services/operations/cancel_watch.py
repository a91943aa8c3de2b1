"""Tell open heartbeat streams, within a fraction of a second, that their owner cancelled.

A stream registers the operation its lease is for; a cancel committed in this
process wakes it at once (``Database.events``), one committed elsewhere is
found by the shared query (``storage.operations.cancels_among``). Each stream
is woken once.
"""

from __future__ import annotations

from collections.abc import Sequence

from durable_ops.operations.row_watch import RowWatch
from durable_ops.storage import operations
from durable_ops.storage.db import Database
from durable_ops.storage.events import Changed, Committed


class CancelWatch(RowWatch):
    def __init__(self, db: Database, interval_seconds: float) -> None:
        super().__init__("cancel_watch", db, interval_seconds, operations.cancels_among)
        db.events.subscribe(self._committed)

    def _committed(self, changes: Sequence[Committed]) -> None:
        for change in changes:
            if isinstance(change, Changed) and change.cancel_asked:
                self.wake(change.operation_id)

    async def close(self) -> None:
        self._db.events.unsubscribe(self._committed)
        await super().close()
