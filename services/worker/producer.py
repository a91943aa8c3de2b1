"""The producer: claims for the free slots and starts an attempt on each (ADR 0023).

A claim asks for as many operations as there are free slots, up to
``batch_size``. One window, ``claim_gather_seconds``, keeps claims (and so
completions) from shrinking to one or two operations each (ADR 0031):

- after a claim that took some work but less than it asked for (a trickle),
  the next claim waits the window, so that what arrives meanwhile is claimed
  together (River's fetch cooldown; the server held claims so before ADR 34);
- while attempts run and fewer than half a claim's worth of slots are free,
  a claim first waits up to the window for more slots to free.

A claim that filled its batch (a backlog) or found nothing (a quiet spell)
lets the next go at once. Figure 1 (lifecycles through the SDK ÷ raw SQL)
needs the first rule: without it claims took 1-2 operations each and the
Operations server's CPU per lifecycle doubled.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import structlog

from durable_ops import telemetry
from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.model import bounds
from durable_ops.model.errors import DomainError
from durable_ops.model.routing import Route
from durable_ops.rpc.states import route_to_pb
from durable_ops.worker.attempt import Claimed
from durable_ops.worker.completer import CALL_TIMEOUT_SECONDS
from durable_ops.worker.lease import wait_set

# How long a claim waits in the service for work: the one call an idle worker makes.
CLAIM_WAIT_SECONDS = 10.0
CLAIM_RETRY_SECONDS = 0.5  # the pause after a claim the service refused
MAX_CLAIM_GATHER_SECONDS = 1.0
Start = Callable[[Claimed], Coroutine[Any, Any, None]]
# The worker's ``ClaimOperations`` call: a request and its timeout; a refusal raised as its
# ``DomainError``.
Claim = Callable[[pb.ClaimOperationsRequest, float], Awaitable[pb.ClaimOperationsResponse]]
_log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class WorkerOptions:
    concurrency: int = 10  # attempts running at once
    batch_size: int = 10  # operations per claim, and settlements per call
    lease_seconds: int = 30
    # How long a claim waits for more work or slots after a short claim, or while few slots
    # are free (the module's docstring; ADR 0031).
    claim_gather_seconds: float = 0.1
    # How long stop() lets running attempts finish before it cancels them and releases
    # their leases. Short: a release spends no attempt and the operation is queued at once.
    shutdown_seconds: float = 1.0
    # Named in every claim, each claim starting with the next: a claim fills its routes in
    # order, so work on a later route is served while the first keeps receiving more.
    # Empty: the local route.
    routes: tuple[Route, ...] = ()
    trace_name: str = "worker"  # spans are "<trace_name>.claim" and "<trace_name>.complete"

    def validated(self) -> WorkerOptions:
        bounds.int_range("concurrency", self.concurrency, (1, 1000))
        bounds.int_range("batch_size", self.batch_size, (1, 100))
        bounds.int_range("lease_seconds", self.lease_seconds, bounds.LEASE_SECONDS_RANGE)
        if not 0 <= self.claim_gather_seconds <= MAX_CLAIM_GATHER_SECONDS:
            raise ValueError(f"claim_gather_seconds must be 0 to {MAX_CLAIM_GATHER_SECONDS}")
        if len(set(self.routes)) != len(self.routes):
            raise ValueError("routes must name each route once")
        return self


class Producer:
    def __init__(
        self,
        options: WorkerOptions,
        task_types: Iterable[str],
        claim: Claim,
        *,
        until_empty: bool,
    ) -> None:
        self._options = options
        self._task_types = task_types
        self._claim_call = claim
        self._until_empty = until_empty  # claims do not wait; stop when one finds nothing
        # Fewer free slots than this (so attempts run) are gathered before a claim.
        self._enough_free = min(options.batch_size, options.concurrency) // 2
        self._running: set[asyncio.Task[None]] = set()
        self._stopping = asyncio.Event()
        self._free = asyncio.Event()  # an attempt ended, or the worker stops
        self._claiming: asyncio.Task[list[pb.ClaimedOperation]] | None = None
        self._turn = 0  # which route the next claim starts with
        self._claims_failing = False

    @property
    def stopped(self) -> bool:
        return self._stopping.is_set()

    def stop(self) -> None:
        """Stop claiming: a waiting claim is given up, unless it already took work."""
        self._stopping.set()
        self._free.set()
        if self._claiming is not None:
            self._claiming.cancel()

    async def run(self, start: Start) -> None:
        """Claim and start attempts until stopped; then give the running ones
        ``shutdown_seconds`` to finish, and cancel the rest (their leases released)."""
        while not self.stopped:
            self._free.clear()  # before counting: an attempt ending from here on wakes the wait
            if self._free_slots() <= 0:
                await self._free.wait()
                continue
            if self._free_slots() < self._enough_free:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._options.claim_gather_seconds):
                        while self._free_slots() < self._enough_free and not self.stopped:
                            self._free.clear()
                            await self._free.wait()
                if self.stopped:
                    break
            asked = min(self._free_slots(), self._options.batch_size)
            claimed = await self._claim(asked)
            if claimed is None:
                continue
            if not claimed and self._until_empty:
                if not self._running:
                    break
                await self._free.wait()  # a claim without a wait: ask again once an attempt ends
            for one in claimed:
                task = asyncio.create_task(start(Claimed.from_pb(one)))
                self._running.add(task)
                task.add_done_callback(self._attempt_done)
            if 0 < len(claimed) < asked:  # a trickle: let more arrive before the next claim
                await wait_set(self._stopping, self._options.claim_gather_seconds)
        if self._running:
            _, late = await asyncio.wait(self._running, timeout=self._options.shutdown_seconds)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)

    def _free_slots(self) -> int:
        return self._options.concurrency - len(self._running)

    def _attempt_done(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        self._free.set()

    async def _claim(self, asked: int) -> list[pb.ClaimedOperation] | None:
        """What one claim took (nothing if the worker stopped meanwhile); ``None`` after a
        pause if the service refused it."""
        self._claiming = asyncio.create_task(self._ask(asked))
        try:
            await asyncio.wait({self._claiming})
        finally:
            self._claiming.cancel()  # our own task was cancelled
        if self._claiming.cancelled():
            return []
        error = self._claiming.exception()
        if isinstance(error, DomainError):
            if not self._claims_failing:
                _log.warning("worker_claim_failing", code=error.code)
            self._claims_failing = True
            await wait_set(self._stopping, CLAIM_RETRY_SECONDS)
            return None
        if self._claims_failing:
            _log.info("worker_claim_recovered")
            self._claims_failing = False
        return self._claiming.result()

    async def _ask(self, asked: int) -> list[pb.ClaimedOperation]:
        routes, first = self._options.routes, self._turn % max(len(self._options.routes), 1)
        self._turn += 1
        request = pb.ClaimOperationsRequest(
            task_types=list(self._task_types),
            lease_seconds=self._options.lease_seconds,
            max_operations=asked,
            routes=[route_to_pb(route) for route in (*routes[first:], *routes[:first])],
        )
        wait = 0.0 if self._until_empty else CLAIM_WAIT_SECONDS
        request.wait.FromTimedelta(timedelta(seconds=wait))
        # A trace of its own, linked (once the reply names them) to the requests that
        # created the work; a claim of one operation also names it.
        with telemetry.span(f"{self._options.trace_name}.claim", root=True) as span:
            reply = await self._claim_call(request, wait + CALL_TIMEOUT_SECONDS)
            for one in reply.claimed:
                telemetry.add_link(span, one.trace_parent)
            if len(reply.claimed) == 1:
                span.set_attribute(telemetry.OPERATION_ID, reply.claimed[0].operation.id)
        return list(reply.claimed)
