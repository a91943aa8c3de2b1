"""The claim loop: neutral-scope claims by priority, up to ``concurrency`` at once.

An idle worker does not poll: its claim waits in the Operations service (up to
``CLAIM_WAIT_SECONDS``), which answers the moment work arrives. One claim
names every route the worker holds, starting with a different one each
round, so a worker holding the external route serves operations waiting for
the fallback even while local work keeps arriving. A failing claim is retried
after ``poll_seconds``. On stop it claims nothing more (the waiting claim is
cancelled), lets running attempts finish for a grace period, then makes the
rest give their leases back (``worker_shutdown``, retryable).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

import structlog

from durable_ops.ai_worker.claims import ClaimedOperation
from durable_ops.ai_worker.clients import OperationsClient
from durable_ops.ai_worker.execution import Executor
from durable_ops.ai_worker.journal import JournalError
from durable_ops.model.errors import DomainError
from durable_ops.model.routing import Route

# Shorter than the grace ``opsctl up`` and service managers give before SIGKILL.
SHUTDOWN_GRACE_SECONDS = 5.0
CLAIM_WAIT_SECONDS = 10.0

_log = structlog.get_logger(__name__)


async def _sleep_unless(stopping: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stopping.wait(), seconds)


class WorkerLoop:
    def __init__(
        self,
        operations: OperationsClient,
        executor: Executor,
        *,
        task_types: Sequence[str],
        routes: Sequence[Route],
        concurrency: int,
        lease_seconds: int,
        poll_seconds: float,
        shutdown_grace_seconds: float = SHUTDOWN_GRACE_SECONDS,
        claim_wait_seconds: float = CLAIM_WAIT_SECONDS,
    ) -> None:
        self._operations = operations
        self._executor = executor
        self._task_types = list(task_types)
        self._routes = list(routes)
        self._concurrency = concurrency
        self._lease_seconds = lease_seconds
        self._poll_seconds = poll_seconds
        self._grace = shutdown_grace_seconds
        self._claim_wait = claim_wait_seconds
        self._turn = 0
        self._claims_failing = False
        self._fatal: JournalError | None = None

    async def run(self, stopping: asyncio.Event) -> None:
        """Claim and execute until ``stopping`` is set; raises a journal failure after draining."""
        release = asyncio.Event()
        running: set[asyncio.Task[None]] = set()
        try:
            while not stopping.is_set() and self._fatal is None:
                if len(running) >= self._concurrency:
                    stop = asyncio.create_task(stopping.wait())
                    await asyncio.wait({*running, stop}, return_when=asyncio.FIRST_COMPLETED)
                    stop.cancel()
                    continue
                claimed = await self._claim_unless(stopping)
                if claimed is None:
                    if self._claims_failing:
                        await _sleep_unless(stopping, self._poll_seconds)
                    continue
                task = asyncio.create_task(self._executor.execute(claimed, release))
                running.add(task)
                task.add_done_callback(lambda done: self._finished(done, running, stopping))
        finally:
            await self._drain(running, release)
        if self._fatal is not None:
            raise self._fatal

    async def _claim_unless(self, stopping: asyncio.Event) -> ClaimedOperation | None:
        """A waiting claim, given up when the worker stops (unless it already took work)."""
        claim = asyncio.create_task(self._claim())
        stop = asyncio.create_task(stopping.wait())
        try:
            await asyncio.wait({claim, stop}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            claim.cancel()
            raise
        finally:
            stop.cancel()
        if not claim.done():
            claim.cancel()
            await asyncio.wait({claim})
        return None if claim.cancelled() else claim.result()

    async def _claim(self) -> ClaimedOperation | None:
        order = self._routes[self._turn :] + self._routes[: self._turn]
        self._turn = (self._turn + 1) % len(self._routes)
        try:
            claimed = await self._operations.claim(
                self._task_types, self._lease_seconds, order, wait_seconds=self._claim_wait
            )
        except DomainError as error:
            if not self._claims_failing:
                _log.warning("claim_failing", code=error.code)
            self._claims_failing = True
            return None
        if self._claims_failing:
            _log.info("claim_recovered")
            self._claims_failing = False
        if claimed is not None:
            _log.info("operation_taken", **claimed.log_fields())
        return claimed

    def _finished(
        self, task: asyncio.Task[None], running: set[asyncio.Task[None]], stopping: asyncio.Event
    ) -> None:
        running.discard(task)
        if task.cancelled():
            return
        error = task.exception()
        if isinstance(error, JournalError):
            _log.error("journal_failed", reason=error.message)
            self._fatal = self._fatal or error
            stopping.set()
        elif error is not None:
            # A bug, not an outcome: the lease expires and the sweeper retries the operation.
            _log.error("attempt_crashed", error_type=type(error).__name__)

    async def _drain(self, running: set[asyncio.Task[None]], release: asyncio.Event) -> None:
        if not running:
            return
        _log.info("worker_draining", in_flight=len(running), grace_seconds=self._grace)
        _done, pending = await asyncio.wait(set(running), timeout=self._grace)
        if pending:
            release.set()
            await asyncio.wait(pending)
