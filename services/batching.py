"""Gather concurrent requests for a moment and apply them together (issue 17).

``Batcher.submit`` waits at most ``window_seconds`` for other items to join
its batch, or until ``max_batch`` are waiting, then ``apply`` runs once for
the batch and each caller gets its own item's answer, or its own error. An
error of the whole ``apply`` reaches every caller of that batch. The worker
SDK sends its completions and failures this way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

Item = TypeVar("Item")
Answer = TypeVar("Answer")
Apply = Callable[[list[Item]], Awaitable[Sequence[Answer | Exception]]]


@dataclass
class _Waiting(Generic[Item, Answer]):
    item: Item
    answer: asyncio.Future[Answer] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class Batcher(Generic[Item, Answer]):
    def __init__(self, apply: Apply[Item, Answer], max_batch: int, window_seconds: float) -> None:
        self._apply = apply
        self._max = max_batch
        self._window = window_seconds
        self._waiting: list[_Waiting[Item, Answer]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._running: set[asyncio.Task[None]] = set()
        self.batches = 0  # times ``apply`` ran
        self.items = 0  # items it was given

    async def submit(self, item: Item) -> Answer:
        waiting: _Waiting[Item, Answer] = _Waiting(item)
        self._waiting.append(waiting)
        if len(self._waiting) >= self._max:
            self._flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._window, self._flush)
        return await waiting.answer

    async def drain(self) -> None:
        """Apply what waits, and wait for every batch in flight."""
        self._flush()
        while self._running:
            await asyncio.gather(*self._running, return_exceptions=True)

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch, self._waiting = self._waiting, []
        if batch:
            task = asyncio.create_task(self._deliver(batch))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _deliver(self, batch: list[_Waiting[Item, Answer]]) -> None:
        self.batches += 1
        self.items += len(batch)
        try:
            answers = await self._apply([waiting.item for waiting in batch])
            if len(answers) != len(batch):
                raise RuntimeError(f"{len(answers)} answers for {len(batch)} items")
        except Exception as error:
            for waiting in batch:
                waiting.answer.set_exception(error)
            return
        for waiting, answer in zip(batch, answers, strict=True):
            if isinstance(answer, Exception):
                waiting.answer.set_exception(answer)
            else:
                waiting.answer.set_result(answer)
