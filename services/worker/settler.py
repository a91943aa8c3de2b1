"""Settlements sent in batches: one call, and one transaction, for many.

A finished attempt's settlement (a completion, a failure, a fallback, an
acknowledged cancel) waits at most ``flush_seconds`` for others to join it, or
until ``batch_size`` are waiting, then goes in one ``SettleOperations`` call;
each caller gets its own item's answer. A call that meets an Operations
service away (UNAVAILABLE) is asked again, for up to ``RETRY_SECONDS``:
repeating is safe, since a lease holder's repeated settlement answers the
state it reached the first time.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import grpc
from google.protobuf.message import Message

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.batching import Batcher
from durable_ops.model.availability import next_attempt_in
from durable_ops.model.errors import Unavailable
from durable_ops.rpc.errors import domain_error_from_rpc

RETRY_SECONDS = 30.0
CALL_TIMEOUT_SECONDS = 10.0

Item = TypeVar("Item", bound=Message)
Reply = TypeVar("Reply", bound=Message)
Outcome = pb.LeaseMutationsResponse.Outcome
Send = Callable[[Sequence[Item]], Awaitable[pb.LeaseMutationsResponse]]


def settler(send: Send[Item], batch_size: int, flush_seconds: float) -> Batcher[Item, Outcome]:
    """A batcher whose batches go out by ``send``, asked again while the service is away."""

    async def apply(items: list[Item]) -> Sequence[Outcome]:
        reply = await retrying(lambda: send(items))
        return list(reply.outcomes)

    return Batcher(apply, batch_size, flush_seconds)


async def retrying(call: Callable[[], Awaitable[Reply]]) -> Reply:
    """``call``'s reply, asked again while the service answers UNAVAILABLE (within
    ``RETRY_SECONDS``); any other refusal is raised at once as its ``DomainError``."""
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
