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

import asyncio
from dataclasses import dataclass, field

from durable_ops.clock import Clock
from durable_ops.model.errors import DomainError
from durable_ops.model.states import OperationState
from durable_ops.storage import operations
from durable_ops.storage.db import Database


@dataclass
class _Waiting:
    completion: operations.Completion
    answer: asyncio.Future[OperationState] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class CompletionGroup:
    def __init__(
        self, db: Database, clock: Clock, window_seconds: float, max_batch: int = 50
    ) -> None:
        self._db = db
        self._clock = clock
        self._window = window_seconds
        self._max = max_batch
        self._waiting: list[_Waiting] = []
        self._timer: asyncio.TimerHandle | None = None
        self._flushes: set[asyncio.Task[None]] = set()
        self.transactions = 0  # groups applied, each one transaction
        self.completions = 0  # completions in them

    async def complete(self, completion: operations.Completion) -> OperationState:
        waiting = _Waiting(completion)
        self._waiting.append(waiting)
        if len(self._waiting) >= self._max:
            self._flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._window, self._flush)
        return await waiting.answer

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        group, self._waiting = self._waiting, []
        if group:
            task = asyncio.create_task(self._apply(group))
            self._flushes.add(task)
            task.add_done_callback(self._flushes.discard)

    async def _apply(self, group: list[_Waiting]) -> None:
        completions = [waiting.completion for waiting in group]
        self.transactions += 1
        self.completions += len(completions)
        now = self._clock()
        try:
            answers = await self._db.run_core_async(
                lambda tx: operations.complete_many(tx, completions, now), owner_id=None
            )
        except BaseException as error:
            for waiting in group:
                waiting.answer.set_exception(error)
            return
        for waiting, answer in zip(group, answers, strict=True):
            if isinstance(answer, DomainError):
                waiting.answer.set_exception(answer)
            else:
                waiting.answer.set_result(answer)

    async def close(self) -> None:
        self._flush()
        if self._flushes:
            await asyncio.gather(*self._flushes, return_exceptions=True)
