"""The worker: claims in batches, runs a handler per attempt, settles in batches (ADR 0023).

One claim loop asks for as many operations as there are free slots (at most
``batch_size``, waiting up to ``claim_wait_seconds`` for work) in one
``ClaimOperations``; each attempt runs its task type's handler. While attempts run
and fewer than half a claim's worth of slots are free, it first waits up to
``claim_gather_seconds`` for more: claiming again for every attempt that ended
made claims (and completions) of one or two operations each. An attempt that runs
longer than ``heartbeat_after_seconds``, or reports progress, joins the
worker's one lease stream (``durable_ops.worker.lease``): it keeps the lease
alive, carries progress, and brings the owner's cancel at once, which cancels
the handler. Completions and failures go in batches (``settler``).

What a handler's end becomes: a return, a completion (a returned string is the
result reference); ``PermanentFailure``, a failure; ``RetryableFailure`` or any
other exception, a retryable failure; the owner's cancel, an acknowledged
cancellation; a lost lease, nothing (the work is no longer this worker's).

A worker that holds several routes (``routes``) names them all in every
claim, starting each claim with the next one. ``interceptors`` wrap each attempt,
the first one outermost (what a worker does per attempt besides the handler:
a journal, a trace, as Temporal's SDK interceptors do); if one fails, the attempt
is released and the worker stops, and ``run()`` raises that
error once the rest have drained. ``classify`` maps a handler's exception to
its settlement (``failures.failure_of`` by default).

``stop()`` stops claiming (a waiting claim is given up) and gives running
attempts ``shutdown_seconds`` to finish; the rest are cancelled and released as
retryable failures (``worker_shutdown``), so another worker takes them at once
instead of after their lease. Short attempts never open a stream: a no-op costs one claim and one
completion, each shared with the rest of its batch.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

import grpc
import structlog
from google.protobuf.message import Message

from durable_ops import telemetry
from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.api.operations.v1 import operations_pb2_grpc as pb_grpc
from durable_ops.model import bounds
from durable_ops.model.errors import CANCEL_REQUESTED, DomainError, LeaseLost
from durable_ops.model.routing import Route
from durable_ops.model.scope import Role
from durable_ops.rpc.client import ServiceCaller, open_channel
from durable_ops.rpc.errors import domain_error_from_rpc
from durable_ops.rpc.states import route_to_pb
from durable_ops.worker.attempt import Attempt, Claimed, Ending
from durable_ops.worker.failures import (
    ExternalFallback,
    HandlerFailure,
    Settlement,
    WorkerShutdown,
    failure_of,
)
from durable_ops.worker.lease import Lease, LeaseStream
from durable_ops.worker.outcomes import Completed, completed, provenance_to_pb
from durable_ops.worker.routes import rotated
from durable_ops.worker.settler import CALL_TIMEOUT_SECONDS, settler

Handler = Callable[[Attempt], Awaitable[str | Completed | None]]
# Entered before an attempt's handler runs, exited once the attempt is settled (``attempt.ending``).
Interceptor = Callable[[Attempt], AbstractAsyncContextManager[object]]
Classify = Callable[[Exception], Settlement]
Request = TypeVar("Request", bound=Message)
_log = structlog.get_logger(__name__)
MAX_CLAIM_GATHER_SECONDS = 1.0


@dataclass(frozen=True)
class WorkerOptions:
    concurrency: int = 10  # attempts running at once
    batch_size: int = 10  # operations per claim, and completions per call
    lease_seconds: int = 30
    claim_wait_seconds: float = 2.0  # how long a claim waits for work
    claim_retry_seconds: float = 0.5  # the pause after a claim the service refused
    # While attempts run and less than half a claim's worth of slots is free, how long a worker
    # waits for more to free before it claims: one claim for several slots, not one per attempt
    # that ends. An idle worker claims at once (ADR 0031).
    claim_gather_seconds: float = 0.03
    flush_seconds: float = 0.002  # how long a completion waits for others to join it
    heartbeat_after_seconds: float = 1.0  # an attempt running longer holds its lease by heartbeat
    shutdown_seconds: float = 10.0  # how long stop() lets running attempts finish
    # The routes claimed for, all in every claim, each claim starting with the next
    # one; empty, the local route.
    routes: tuple[Route, ...] = ()
    trace_name: str = "worker"  # spans are "<trace_name>.claim" and "<trace_name>.complete"

    def validated(self) -> WorkerOptions:
        bounds.int_range("concurrency", self.concurrency, (1, 1000))
        bounds.int_range("batch_size", self.batch_size, (1, 100))
        bounds.int_range("lease_seconds", self.lease_seconds, bounds.LEASE_SECONDS_RANGE)
        if not 0 <= self.claim_gather_seconds <= MAX_CLAIM_GATHER_SECONDS:
            raise ValueError(f"claim_gather_seconds must be 0 to {MAX_CLAIM_GATHER_SECONDS}")
        if self.heartbeat_after_seconds * 3 > self.lease_seconds:
            raise ValueError("heartbeat_after_seconds must leave two thirds of the lease")
        if len(set(self.routes)) != len(self.routes):
            raise ValueError("routes must name each route once")
        return self


class Worker:
    """Runs registered handlers for claimed operations of their task types."""

    def __init__(
        self,
        target: str,
        secret: str,
        options: WorkerOptions | None = None,
        *,
        until_empty: bool = False,
        interceptors: Sequence[Interceptor] = (),
        classify: Classify = failure_of,
    ) -> None:
        self._target = target
        self._caller = ServiceCaller(secret, Role.WORKER)
        self.options = (options or WorkerOptions()).validated()
        # Half of what one claim can take: fewer free slots than this, with attempts running,
        # are gathered for a while before a claim (``claim_gather_seconds``).
        self._enough_free = min(self.options.batch_size, self.options.concurrency) // 2
        self._until_empty = until_empty  # stop once a claim finds nothing and no attempt runs
        self._interceptors = list(interceptors)
        self._classify = classify
        self._handlers: dict[str, Handler] = {}
        self._running: set[asyncio.Task[None]] = set()
        self._stopping = asyncio.Event()
        self._free = asyncio.Event()
        self._turn = 0  # which route the next claim starts with
        self._claims_failing = False
        self._fatal: Exception | None = None  # what stopped the worker, raised by run()
        self.completed = 0
        self.failed = 0

    def handler(self, task_type: str) -> Callable[[Handler], Handler]:
        """``@worker.handler("report.render")`` on ``async def render(attempt) -> str | None``."""

        def register(function: Handler) -> Handler:
            self._handlers[bounds.task_type(task_type)] = function
            return function

        return register

    def stop(self) -> None:
        """Stop claiming; running attempts get ``shutdown_seconds`` to finish."""
        self._stopping.set()
        self._free.set()

    async def run(self) -> None:
        """Claim and run until ``stop()`` (or, ``until_empty``, until the queue is empty).

        Raises what made an interceptor fail, once the running attempts are drained.
        """
        if not self._handlers:
            raise ValueError("register a handler first")
        channel = open_channel(self._target)
        self._stub = pb_grpc.OperationsServiceStub(channel)
        self.leases = LeaseStream(lambda: self._stub.HoldLeases(metadata=self._caller.metadata()))
        self._settlements = settler(
            self._send_settlements, self.options.batch_size, self.options.flush_seconds
        )
        try:
            await self._claim_loop()
            await self._finish_running()
            await self._settlements.drain()
        finally:
            await self.leases.close()
            await channel.close()
        if self._fatal is not None:
            raise self._fatal

    # ---- claiming ----------------------------------------------------------------------------

    async def _claim_loop(self) -> None:
        while not self._stopping.is_set():
            self._free.clear()  # before counting: an attempt ending from here on wakes the wait
            free = self._free_slots()
            if free <= 0:
                await self._free.wait()
                continue
            if self._running and free < self._enough_free:
                free = await self._gather_free_slots()
                if self._stopping.is_set():
                    break
            try:
                claimed = await self._claim_unless_stopped(min(free, self.options.batch_size))
            except DomainError as error:
                if not self._claims_failing:
                    _log.warning("worker_claim_failing", code=error.code)
                self._claims_failing = True
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.options.claim_retry_seconds):
                        await self._stopping.wait()
                continue
            if self._claims_failing:
                _log.info("worker_claim_recovered")
                self._claims_failing = False
            if not claimed and self._until_empty:
                if not self._running:
                    return
                await self._free.wait()  # a claim without a wait: ask again once an attempt ends
                continue
            for one in claimed:
                task = asyncio.create_task(self._run(Attempt(Claimed.from_pb(one), self._hold)))
                self._running.add(task)
                task.add_done_callback(self._attempt_done)

    def _free_slots(self) -> int:
        return self.options.concurrency - len(self._running)

    async def _gather_free_slots(self) -> int:
        """The free slots after waiting, at most ``claim_gather_seconds``, for half a claim's
        worth (``_enough_free``) while attempts run."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.options.claim_gather_seconds):
                while self._running and self._free_slots() < self._enough_free:
                    if self._stopping.is_set():
                        break
                    self._free.clear()
                    await self._free.wait()
        return self._free_slots()

    async def _claim_unless_stopped(self, limit: int) -> Sequence[pb.ClaimedOperation]:
        """A waiting claim, given up when the worker stops (unless it already took work)."""
        claim = asyncio.create_task(self._claim(limit))
        stopped = asyncio.create_task(self._stopping.wait())
        try:
            await asyncio.wait({claim, stopped}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            claim.cancel()
            raise
        finally:
            stopped.cancel()
        if not claim.done():
            claim.cancel()
            await asyncio.wait({claim})
        return [] if claim.cancelled() else claim.result()

    async def _claim(self, limit: int) -> Sequence[pb.ClaimedOperation]:
        routes = rotated(self.options.routes, self._turn)
        self._turn += 1
        request = pb.ClaimOperationsRequest(
            task_types=list(self._handlers),
            lease_seconds=self.options.lease_seconds,
            max_operations=limit,
            routes=[route_to_pb(route) for route in routes],
        )
        wait = 0.0 if self._until_empty else self.options.claim_wait_seconds
        request.wait.FromTimedelta(timedelta(seconds=wait))
        # A trace of its own, linked (once the reply names them) to the requests that
        # created the work; a claim of one operation also names it.
        with telemetry.span(f"{self.options.trace_name}.claim", root=True) as span:
            try:
                reply = await self._stub.ClaimOperations(
                    request,
                    metadata=self._caller.metadata(),
                    timeout=wait + CALL_TIMEOUT_SECONDS,
                )
            except grpc.aio.AioRpcError as exc:
                raise domain_error_from_rpc(exc) from exc
            for one in reply.claimed:
                telemetry.add_link(span, one.trace_parent)
            if len(reply.claimed) == 1:
                span.set_attribute(telemetry.OPERATION_ID, reply.claimed[0].operation.id)
        return reply.claimed

    def _attempt_done(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        self._free.set()

    async def _finish_running(self) -> None:
        if not self._running:
            return
        _, late = await asyncio.wait(set(self._running), timeout=self.options.shutdown_seconds)
        for task in late:
            task.cancel()
        if late:
            await asyncio.gather(*late, return_exceptions=True)

    # ---- one attempt -----------------------------------------------------------------------------

    async def _run(self, attempt: Attempt) -> None:
        try:
            async with contextlib.AsyncExitStack() as around:
                try:
                    for interceptor in self._interceptors:  # the first one outermost
                        await around.enter_async_context(interceptor(attempt))
                except Exception as error:
                    await self._settle(attempt, self._classify(error))  # give it back first
                    raise
                await self._handle(attempt)
        except Exception as error:
            _log.error(
                "worker_interceptor_failed", **attempt.log_fields(), error=type(error).__name__
            )
            self._fatal = self._fatal or error
            self.stop()

    async def _handle(self, attempt: Attempt) -> None:
        work: asyncio.Task[str | Completed | None] = asyncio.ensure_future(
            self._handlers[attempt.task_type](attempt)
        )
        watch = asyncio.create_task(self._watch(attempt, work))
        try:
            returned = await asyncio.shield(work)
        except asyncio.CancelledError:
            if not work.done():  # the worker is shutting down: stop the handler first
                work.cancel()
                with contextlib.suppress(BaseException):
                    await work
            await self._let_go(attempt, watch)
            await self._after_cancel(attempt)
            return
        except Exception as error:
            await self._let_go(attempt, watch)
            await self._after_error(attempt, error)
            return
        await self._let_go(attempt, watch)
        attempt.result = completed(returned)
        await self._complete(attempt, attempt.result)

    @staticmethod
    async def _let_go(attempt: Attempt, watch: asyncio.Task[None]) -> None:
        """Stop holding the lease before settling: the settlement ends it, and a beat
        crossing it would find the lease gone and call it lost."""
        watch.cancel()
        if attempt.lease is not None:
            await attempt.lease.close()

    async def _watch(self, attempt: Attempt, work: asyncio.Task[str | Completed | None]) -> None:
        """Hold the lease by heartbeat once the attempt runs long (or the handler held it);
        cancel the work when the lease ends."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.options.heartbeat_after_seconds):
                await attempt.held.wait()
        try:
            lease = await attempt.hold()
        except DomainError:  # the first beat found the lease gone
            work.cancel()
            return
        await lease.ended.wait()
        if lease.cancel_requested:
            attempt.cancelled.set()
        work.cancel()

    async def _hold(self, attempt: Attempt) -> Lease:
        if attempt.lease is None:
            attempt.lease = await Lease.open(self, attempt, self.options.lease_seconds)
        return attempt.lease

    async def _after_cancel(self, attempt: Attempt) -> None:
        if attempt.cancelled.is_set():
            await self._acknowledge(attempt)
        elif attempt.lease_lost:
            _log.warning("worker_lease_lost", **attempt.log_fields())
        else:  # stop() ran out of time: release it for another worker now
            await self._fail(attempt, WorkerShutdown())

    async def _after_error(self, attempt: Attempt, error: Exception) -> None:
        if isinstance(error, LeaseLost) and error.code == CANCEL_REQUESTED:
            attempt.cancelled.set()  # a fenced write found the owner's cancel first
        if attempt.cancelled.is_set():
            await self._acknowledge(attempt)
        elif attempt.lease_lost or isinstance(error, LeaseLost):
            _log.warning("worker_lease_lost", **attempt.log_fields())
        else:
            await self._settle(attempt, self._classify(error))

    # ---- settling ----------------------------------------------------------------------------

    async def _complete(self, attempt: Attempt, result: Completed) -> None:
        item = pb.SettleOperationsRequest.Item(
            owner_id=attempt.owner_id,
            complete=pb.CompleteOperationRequest(
                operation_id=attempt.operation_id,
                lease_token=attempt.lease_token,
                result_ref=result.result_ref,
                provenance=provenance_to_pb(result.provenance),
            ),
        )
        with telemetry.span(
            f"{self.options.trace_name}.complete",
            link=attempt.trace_parent,
            operation_id=attempt.operation_id,
        ):
            outcome = await self._submit(item, attempt, "completion")
        if outcome is not None and not outcome.status_code:
            attempt.ending = Ending.COMPLETED
            self.completed += 1

    async def _settle(self, attempt: Attempt, settlement: Settlement) -> None:
        if isinstance(settlement, ExternalFallback):
            await self._fall_back(attempt, settlement)
        else:
            await self._fail(attempt, settlement)

    async def _fail(self, attempt: Attempt, failure: HandlerFailure) -> None:
        item = pb.SettleOperationsRequest.Item(
            owner_id=attempt.owner_id,
            fail=pb.FailOperationRequest(
                operation_id=attempt.operation_id,
                lease_token=attempt.lease_token,
                retryable=failure.retryable,
                failure_code=failure.code,
                failure_message=failure.message,
                provenance=provenance_to_pb(failure.provenance),
            ),
        )
        outcome = await self._submit(item, attempt, "failure")
        if outcome is not None and not outcome.status_code:
            attempt.ending = Ending.FAILED
            self.failed += 1

    async def _fall_back(self, attempt: Attempt, fallback: ExternalFallback) -> None:
        item = pb.SettleOperationsRequest.Item(
            owner_id=attempt.owner_id,
            fallback=pb.RequestExternalFallbackRequest(
                operation_id=attempt.operation_id,
                lease_token=attempt.lease_token,
                provenance=provenance_to_pb(fallback.provenance),
            ),
        )
        outcome = await self._submit(item, attempt, "fallback")
        if outcome is None or outcome.status_code:
            return
        attempt.ending = Ending.FELL_BACK
        self.failed += 1
        _log.info("worker_fell_back", **attempt.log_fields(), reason=fallback.reason)

    async def _acknowledge(self, attempt: Attempt) -> None:
        item = pb.SettleOperationsRequest.Item(
            owner_id=attempt.owner_id,
            acknowledge_cancel=pb.AcknowledgeCancellationRequest(
                operation_id=attempt.operation_id, lease_token=attempt.lease_token
            ),
        )
        outcome = await self._submit(item, attempt, "cancel_acknowledgement")
        if outcome is not None and not outcome.status_code:
            attempt.ending = Ending.CANCELLED

    async def _submit(
        self, item: pb.SettleOperationsRequest.Item, attempt: Attempt, what: str
    ) -> pb.LeaseMutationsResponse.Outcome | None:
        """A settlement's outcome through the one settlement channel, logged when refused;
        ``None`` when it could not be sent (the service stayed away): the lease then runs
        out and the work is tried again."""
        try:
            outcome = await self._settlements.submit(item)
        except Exception as error:
            code = error.code if isinstance(error, DomainError) else type(error).__name__
            _log.warning(f"worker_{what}_not_sent", **attempt.log_fields(), code=code)
            return None
        if outcome.status_code:
            _log.warning(f"worker_{what}_refused", **attempt.log_fields(), code=outcome.error_code)
        return outcome

    async def _send_settlements(
        self, items: Sequence[pb.SettleOperationsRequest.Item]
    ) -> pb.LeaseMutationsResponse:
        reply: pb.LeaseMutationsResponse = await self._stub.SettleOperations(
            pb.SettleOperationsRequest(items=items),
            metadata=self._caller.metadata(),
            timeout=CALL_TIMEOUT_SECONDS,
        )
        return reply


__all__ = ["Classify", "Handler", "Interceptor", "Worker", "WorkerOptions"]
