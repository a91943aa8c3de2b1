"""Completions and failures sent in batches: one call, and one transaction, for many.

A finished job's completion (or failure) waits at most ``flush_seconds`` for
others to join it, or until ``batch_size`` are waiting, then goes in one
``CompleteOperations`` (``FailOperations``) call; each caller gets its own
item's answer. A call that meets an Operations service away (UNAVAILABLE) is
asked again, for up to ``RETRY_SECONDS``: repeating is safe, since a lease
holder's repeated completion answers the state it reached the first time.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import grpc
from google.protobuf.message import Message

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.model.availability import next_attempt_in
from durable_ops.model.errors import Unavailable
from durable_ops.rpc.errors import domain_error_from_rpc

RETRY_SECONDS = 30.0
CALL_TIMEOUT_SECONDS = 10.0

Item = TypeVar("Item", bound=Message)
Outcome = pb.LeaseMutationsResponse.Outcome
Send = Callable[[Sequence[Item]], Awaitable[pb.LeaseMutationsResponse]]


@dataclass
class _Waiting(Generic[Item]):
    item: Item
    answer: asyncio.Future[Outcome] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class Batcher(Generic[Item]):
    """Items gathered for ``flush_seconds`` (or until ``batch_size``), sent by ``send``."""

    def __init__(self, send: Send[Item], batch_size: int, flush_seconds: float) -> None:
        self._send = send
        self._batch_size = batch_size
        self._flush_seconds = flush_seconds
        self._waiting: list[_Waiting[Item]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._flushes: set[asyncio.Task[None]] = set()

    async def submit(self, item: Item) -> Outcome:
        waiting = _Waiting(item)
        self._waiting.append(waiting)
        if len(self._waiting) >= self._batch_size:
            self._flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._flush_seconds, self._flush)
        return await waiting.answer

    async def drain(self) -> None:
        """Send what waits and wait for every batch in flight."""
        self._flush()
        while self._flushes:
            await asyncio.gather(*self._flushes, return_exceptions=True)

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch, self._waiting = self._waiting, []
        if batch:
            task = asyncio.create_task(self._deliver(batch))
            self._flushes.add(task)
            task.add_done_callback(self._flushes.discard)

    async def _deliver(self, batch: list[_Waiting[Item]]) -> None:
        try:
            reply = await _retrying(lambda: self._send([waiting.item for waiting in batch]))
        except BaseException as error:  # every caller hears it, the batch is not lost silently
            for waiting in batch:
                if not waiting.answer.done():
                    waiting.answer.set_exception(error)
            return
        if len(reply.outcomes) != len(batch):
            mismatch = RuntimeError(f"{len(reply.outcomes)} answers for {len(batch)} items")
            for waiting in batch:
                waiting.answer.set_exception(mismatch)
            return
        for waiting, outcome in zip(batch, reply.outcomes, strict=True):
            waiting.answer.set_result(outcome)


async def _retrying(
    call: Callable[[], Awaitable[pb.LeaseMutationsResponse]],
) -> pb.LeaseMutationsResponse:
    loop = asyncio.get_running_loop()
    started = loop.time()
    failures = 0
    while True:
        try:
            return await call()
        except grpc.aio.AioRpcError as exc:
            error = domain_error_from_rpc(exc)
            if not isinstance(error, Unavailable):
                raise error from exc
            failures += 1
            pause = next_attempt_in(failures, loop.time() - started, RETRY_SECONDS, random.random)
            if pause is None:
                raise error from exc
            await asyncio.sleep(pause)
