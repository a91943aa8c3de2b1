"""Group commit of single completions (issue 17, ADR 0022): one transaction for a few.

Completions arriving within ``window_seconds`` of the first (at most
``max_batch``) are applied together by ``storage.operations.complete_many``,
each in its own owner's scope and guarded on its own token; each caller gets
the answer its call alone would have had: a state, or the ``DomainError`` it
raised. A failure of the whole transaction (the database away) reaches every
caller, as it would have reached each alone. Off unless
``OPS_GROUP_COMMIT_MS`` is set.
"""

from __future__ import annotations

from collections.abc import Sequence

from durable_ops.batching import Batcher
from durable_ops.clock import Clock
from durable_ops.model.errors import DomainError
from durable_ops.model.states import OperationState
from durable_ops.storage import operations
from durable_ops.storage.db import Database

MAX_BATCH = 50


class CompletionGroup:
    def __init__(self, db: Database, clock: Clock, window_seconds: float) -> None:
        self._db = db
        self._clock = clock
        self._batcher: Batcher[operations.Completion, OperationState] = Batcher(
            self._apply, MAX_BATCH, window_seconds
        )

    @property
    def transactions(self) -> int:
        return self._batcher.batches

    @property
    def completions(self) -> int:
        return self._batcher.items

    async def complete(self, completion: operations.Completion) -> OperationState:
        return await self._batcher.submit(completion)

    async def _apply(
        self, completions: list[operations.Completion]
    ) -> Sequence[OperationState | DomainError]:
        now = self._clock()
        return await self._db.run_core_async(
            lambda tx: operations.complete_many(tx, completions, now), owner_id=None
        )

    async def close(self) -> None:
        await self._batcher.drain()
