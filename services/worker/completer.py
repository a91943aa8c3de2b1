"""The completer: every attempt's end is an item of one ``SettleOperations`` channel.

No timer, as in River's batching completer: what ends while no call is in
flight goes on the next turn of the event loop; what ends meanwhile goes in one
call once that returns (a full ``batch_size`` at once). UNAVAILABLE is asked
again while the attempt's lease may still hold (``Attempt.live_until``), and for
``RETRY_SECONDS`` at least: a lease holder's repeat answers what the first did.
The lease, not a shorter bound, because what a service back within it takes is not
done again: an outage of 30 to 60 s while an AI attempt ended (its lease is a
minute) ran the analysis again for another minute or more, its first answer lost.
A settlement that carries usage is asked again for as long as the worker runs: a
service back after the lease refuses it as a lost lease but charges the tokens it
reports (``usage_charged``), which an outage longer than the lease left uncharged.
Once the worker stops, it is asked no more (a pause under way ends in one last
ask): the services may be stopping with it (``opsctl up`` killed outright sends
every child SIGTERM at once) and the stop must not wait for them. A settlement
not sent is left to its lease, and the work is tried again.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict
from functools import partial
from typing import Literal, NamedTuple, TypeVar

import grpc
import structlog
from google.protobuf.message import Message

from durable_ops import telemetry
from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.model.availability import next_attempt_in
from durable_ops.model.errors import DomainError, Unavailable
from durable_ops.model.provenance import Provenance
from durable_ops.model.usage import Usage
from durable_ops.rpc.errors import domain_error_from_rpc
from durable_ops.worker import metrics
from durable_ops.worker.attempt import Attempt, Claimed, Ending
from durable_ops.worker.failures import (
    Completed,
    ExternalFallback,
    HandlerFailure,
    WorkerShutdown,
)
from durable_ops.worker.lease import wait_set

RETRY_SECONDS = 30.0
CALL_TIMEOUT_SECONDS = 10.0

Reply = TypeVar("Reply", bound=Message)
M = TypeVar("M", bound=Message)
Item = pb.SettleOperationsRequest.Item
Answer = pb.LeaseMutationsResponse.Outcome
Send = Callable[[Sequence[Item]], Awaitable[pb.LeaseMutationsResponse]]
# What an attempt's end asks of the service (``Ending.CANCELLED``: acknowledge the cancel;
# ``WorkerShutdown``: release the lease, the operation queued again).
Outcome = Completed | HandlerFailure | ExternalFallback | WorkerShutdown | Literal[Ending.CANCELLED]
_log = structlog.get_logger(__name__)


class _Waiting(NamedTuple):
    """A settlement waiting for its call."""

    item: Item
    answer: asyncio.Future[Answer]
    live_until: float  # when its lease runs out (``time.monotonic``)


class Completer:
    def __init__(self, send: Send, batch_size: int, trace_name: str) -> None:
        self._send = send
        self._batch_size = batch_size
        self._trace_name = trace_name
        self._waiting: list[_Waiting] = []
        self._calls: set[asyncio.Task[None]] = set()
        self._stopping = asyncio.Event()  # the worker stops: UNAVAILABLE is asked no more
        self.endings: Counter[Ending] = Counter()  # what the service accepted

    async def settle(self, attempt: Attempt, outcome: Outcome) -> None:
        """Settle ``attempt`` as ``outcome``; ``attempt.ending`` says what the service accepted."""
        item, ending = settlement_item(attempt, outcome, attempt.usage)
        log = _log.bind(**attempt.log_fields())
        trace = telemetry.span(
            f"{self._trace_name}.complete",
            link=attempt.trace_parent,
            operation_id=attempt.operation_id,
        )
        try:
            with trace if ending is Ending.COMPLETED else contextlib.nullcontext():
                answer = await self._submit(item, attempt.live_until)
        except Exception as error:
            code = error.code if isinstance(error, DomainError) else type(error).__name__
            log.warning("worker_settlement_not_sent", ending=ending, code=code)
            return
        if answer.status_code:
            log.warning(
                "worker_settlement_refused",
                ending=ending,
                code=answer.error_code,
                usage_charged=answer.usage_charged,
            )
            if answer.usage_charged:
                metrics.count(attempt.task_type, attempt.calls)
            return
        attempt.ending = ending
        self.endings[ending] += 1
        metrics.count(attempt.task_type, attempt.calls)
        if isinstance(outcome, ExternalFallback):
            log.info("worker_fell_back", reason=outcome.reason)
        elif isinstance(outcome, HandlerFailure):
            # The code, not the message: a handler's message may quote its owner's content.
            log.info("worker_attempt_failed", code=outcome.code, retryable=outcome.retryable)

    def stop(self) -> None:
        """The worker stops: what the service cannot take from now on is left to its lease
        (the module's docstring)."""
        self._stopping.set()

    async def drain(self) -> None:
        """Send what waits, and wait for every call in flight."""
        while self._waiting or self._calls:
            self._send_due()
            await asyncio.gather(*self._calls, return_exceptions=True)

    async def _submit(self, item: Item, live_until: float) -> Answer:
        answer: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._waiting.append(_Waiting(item, answer, live_until))
        # Not at once: what else ends in this turn of the loop joins the call.
        asyncio.get_running_loop().call_soon(self._send_due)
        return await answer

    def _send_due(self) -> None:
        """A call if none is in flight, and one for each full batch waiting."""
        while self._waiting and (not self._calls or len(self._waiting) >= self._batch_size):
            batch = self._waiting[: self._batch_size]
            del self._waiting[: self._batch_size]
            call = asyncio.create_task(self._call(batch))
            self._calls.add(call)
            call.add_done_callback(self._call_done)

    def _call_done(self, call: asyncio.Task[None]) -> None:
        self._calls.discard(call)
        self._send_due()

    async def _call(self, batch: list[_Waiting]) -> None:
        answered: list[tuple[_Waiting, Answer | Exception]]
        lease_left = max(waiting.live_until for waiting in batch) - time.monotonic()
        spent = any(waiting.item.HasField("usage") for waiting in batch)
        try:
            reply = await retrying(
                lambda: self._send([waiting.item for waiting in batch]),
                stopping=self._stopping,
                within=math.inf if spent else max(RETRY_SECONDS, lease_left),
            )
            answered = list(zip(batch, reply.outcomes, strict=True))
        except Exception as error:
            answered = [(waiting, error) for waiting in batch]
        for waiting, outcome in answered:
            if waiting.answer.cancelled():  # its attempt was cancelled at shutdown meanwhile
                continue
            if isinstance(outcome, Exception):
                waiting.answer.set_exception(outcome)
            else:
                waiting.answer.set_result(outcome)


def settlement_item(
    attempt: Claimed, outcome: Outcome, usage: Usage | None = None
) -> tuple[Item, Ending]:
    """The item of the settlement channel that ends ``attempt`` as ``outcome``, carrying
    what its model calls used (``usage``), whatever the outcome."""
    item = partial(Item, owner_id=attempt.owner_id, usage=_message(pb.Usage, usage))
    lease = {"operation_id": attempt.operation_id, "lease_token": attempt.lease_token}
    if isinstance(outcome, WorkerShutdown):
        return item(release=pb.ReleaseOperationRequest(**lease)), Ending.RELEASED
    if not isinstance(outcome, Completed | HandlerFailure | ExternalFallback):
        return item(acknowledge_cancel=pb.AcknowledgeCancellationRequest(**lease)), Ending.CANCELLED
    provenance = _message(pb.Provenance, outcome.provenance)
    if isinstance(outcome, ExternalFallback):
        fallback = pb.RequestExternalFallbackRequest(**lease, provenance=provenance)
        return item(fallback=fallback), Ending.FELL_BACK
    if isinstance(outcome, Completed):
        complete = pb.CompleteOperationRequest(
            **lease, provenance=provenance, result_ref=outcome.result_ref
        )
        return item(complete=complete), Ending.COMPLETED
    fail = pb.FailOperationRequest(
        operation_id=attempt.operation_id,
        lease_token=attempt.lease_token,
        provenance=provenance,
        retryable=outcome.retryable,
        failure_code=outcome.code,
        failure_message=outcome.message,
    )
    if outcome.retry_after is not None:  # a provider's Retry-After: the retry waits for it
        fail.retry_after.FromTimedelta(outcome.retry_after)
    return item(fail=fail), Ending.FAILED


def _message(message: type[M], fields: Usage | Provenance | None) -> M | None:
    """``fields`` (a dataclass named as the message's fields) as ``message``; None as unset."""
    return None if fields is None else message(**asdict(fields))


async def retrying(
    call: Callable[[], Awaitable[Reply]],
    *,
    stopping: asyncio.Event | None = None,
    within: float | None = None,
) -> Reply:
    """``call``'s reply, asked again while the service answers UNAVAILABLE (for ``within``
    seconds, ``RETRY_SECONDS`` unless given, and not once ``stopping`` is set: a pause it
    cuts short ends in one last ask); any other refusal is raised at once as its
    ``DomainError``."""
    stopping = stopping or asyncio.Event()
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
            bound = RETRY_SECONDS if within is None else within
            pause = next_attempt_in(failures, loop.time() - started, bound, random.random)
            if pause is None or stopping.is_set():
                raise error from exc
            await wait_set(stopping, pause)
