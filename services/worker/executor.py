"""The executor: one attempt, from its handler to the outcome the completer settles.

A return completes; an exception fails as ``classify`` says, but for the SDK's
``InvalidHandlerCall``, which fails at once (``failures``); the owner's cancel
is acknowledged; a lost lease settles nothing; the worker's stop, once its grace
is over, cancels the handler as a shutdown and releases the lease. An attempt running longer than
``HEARTBEAT_AFTER_SECONDS`` (or holding its lease itself) joins the lease stream,
whose cancel or loss cancels the handler; shorter ones live on the claim's lease.
Interceptors wrap each attempt, the first outermost, as in Temporal's SDK.
"""

from __future__ import annotations

import asyncio
import contextlib
import traceback
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass

import structlog

from durable_ops.model.errors import CANCEL_REQUESTED, DomainError, LeaseLost
from durable_ops.worker.attempt import Attempt, Claimed, Ending
from durable_ops.worker.completer import Completer, Outcome
from durable_ops.worker.failures import (
    Completed,
    ExternalFallback,
    HandlerFailure,
    InvalidHandlerCall,
    Settlement,
    WorkerShutdown,
    completed,
)
from durable_ops.worker.lease import LeaseStream, wait_set

HEARTBEAT_AFTER_SECONDS = 1.0  # at most a third of the shortest lease

Returned = str | Completed | None  # what a handler returns (``failures.completed``)
Handler = Callable[[Attempt], Awaitable[Returned]]
# Entered before an attempt's handler runs, exited once the attempt is settled (``attempt.ending``).
Interceptor = Callable[[Attempt], AbstractAsyncContextManager[object]]
Classify = Callable[[Exception], Settlement]
_log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Executor:
    handlers: Mapping[str, Handler]
    interceptors: Sequence[Interceptor]
    classify: Classify
    completer: Completer
    leases: LeaseStream
    lease_seconds: int
    on_fatal: Callable[[Exception], None]  # an interceptor failed: the worker stops

    async def run(self, claimed: Claimed) -> None:
        attempt = Attempt(claimed, self.leases, self.lease_seconds)
        try:
            async with contextlib.AsyncExitStack() as around:
                try:
                    for interceptor in self.interceptors:
                        await around.enter_async_context(interceptor(attempt))
                except Exception as error:
                    await self.completer.settle(attempt, self.classify(error))  # give it back
                    raise
                await self._handle(attempt)
        except Exception as error:
            _log.error(
                "worker_interceptor_failed", **attempt.log_fields(), error=type(error).__name__
            )
            self.on_fatal(error)

    async def _handle(self, attempt: Attempt) -> None:
        work = asyncio.ensure_future(self.handlers[attempt.task_type](attempt))
        watch = asyncio.create_task(self._watch(attempt, work))
        outcome: Outcome | None
        try:
            returned = await asyncio.shield(work)
        except (asyncio.CancelledError, Exception) as raised:
            if not work.done():  # the worker is shutting down: stop the handler first
                attempt.shutting_down = True
                work.cancel()
                with contextlib.suppress(BaseException):
                    await work
            outcome = outcome_of(attempt, self.classify, raised=raised)
        else:
            outcome = outcome_of(attempt, self.classify, returned=returned)
        finally:
            # Off the lease stream before settling: the settlement ends the lease, and a beat
            # crossing it would find the lease gone and call it lost.
            watch.cancel()
            if attempt.lease is not None:
                await attempt.lease.close()
        if outcome is not None:
            await self.completer.settle(attempt, outcome)

    @staticmethod
    async def _watch(attempt: Attempt, work: asyncio.Future[Returned]) -> None:
        """Hold the lease once the attempt runs long (or the handler held it); cancel the
        work when the lease ends."""
        await wait_set(attempt.joined, HEARTBEAT_AFTER_SECONDS)
        await lease_ended(attempt)
        work.cancel()


async def lease_ended(attempt: Attempt) -> None:
    """Hold ``attempt``'s lease until it ends, lost or (``attempt.cancelled`` then set) by its
    owner's cancel; ``durable_ops.worker.testing`` delivers the end of its lease so too."""
    with contextlib.suppress(DomainError):  # else the first beat found the lease gone
        lease = await attempt.hold()
        await lease.ended.wait()
        if lease.cancel_requested:
            attempt.cancelled.set()


def outcome_of(
    attempt: Attempt,
    classify: Classify,
    *,
    returned: object = None,
    raised: Exception | asyncio.CancelledError | None = None,
) -> Outcome | None:
    """What ``attempt`` is settled as, its handler having returned ``returned`` or raised
    ``raised`` (``CancelledError``: its task was cancelled); None settles nothing (the lease
    is lost). The SDK's one rule for it, which the executor and ``durable_ops.worker.testing``
    both follow, so that a handler's unit test cannot drift from the worker. It calls no
    service; it keeps ``attempt.result`` and ``attempt.cancelled`` and logs what it decided."""
    log = _log.bind(**attempt.log_fields())
    if raised is None:
        outcome = completed(returned)
        if isinstance(outcome, Completed):
            attempt.result = outcome
        else:
            log.warning("worker_result_refused", why=str(outcome))
        return outcome
    if isinstance(raised, LeaseLost) and raised.code == CANCEL_REQUESTED:
        attempt.cancelled.set()  # a fenced write found the owner's cancel first
    if attempt.cancelled.is_set():
        return Ending.CANCELLED
    if attempt.lease_lost or isinstance(raised, LeaseLost):
        log.warning("worker_lease_lost")
        return None
    if isinstance(raised, asyncio.CancelledError):
        # stop()'s grace ran out: hand it back, queued at once, the attempt not spent.
        return WorkerShutdown()
    if isinstance(raised, InvalidHandlerCall):
        # The SDK's own wording, which quotes no user content: the developer reads what
        # was wrong, and the stack shows the call.
        log.warning("worker_handler_call_refused", why=raised.message, stack=_stack(raised))
        return raised.failure()
    if not isinstance(raised, HandlerFailure | ExternalFallback):
        # Type and stack only, as the services log a fault: the text may quote user
        # content. What the developer has to go on; the owner sees the code alone.
        error_type = type(raised).__qualname__
        log.warning("worker_handler_raised", error_type=error_type, stack=_stack(raised))
    return classify(raised)


def _stack(error: Exception) -> str:
    """Where ``error`` was raised, as the frames' code lines (no values)."""
    return "".join(traceback.format_tb(error.__traceback__))
