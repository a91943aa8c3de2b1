"""The worker: claims in batches, runs a handler per job, settles in batches (ADR 0023).

One claim loop asks for as many operations as there are free slots (at most
``batch_size``, waiting up to ``claim_wait_seconds`` for work) in one
``ClaimOperations``; each job runs its task type's handler. A job that runs
longer than ``heartbeat_after_seconds``, or reports progress, joins the
worker's one lease stream (``durable_ops.worker.lease``): it keeps the lease
alive, carries progress, and brings the owner's cancel at once, which cancels
the handler. Completions and failures go in batches (``settler``).

What a handler's end becomes: a return, a completion (a returned string is the
result reference); ``PermanentFailure``, a failure; ``RetryableFailure`` or any
other exception, a retryable failure; the owner's cancel, an acknowledged
cancellation; a lost lease, nothing (the work is no longer this worker's).

``stop()`` stops claiming and gives running jobs ``shutdown_seconds`` to
finish; the rest are cancelled and released as retryable failures
(``worker_shutdown``), so another worker takes them at once instead of after
their lease. Short jobs never open a stream: a no-op costs one claim and one
completion, each shared with the rest of its batch.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta

import grpc
import structlog

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.api.operations.v1 import operations_pb2_grpc as pb_grpc
from durable_ops.model import bounds
from durable_ops.model.errors import DomainError
from durable_ops.model.scope import Role
from durable_ops.rpc.client import ServiceCaller, open_channel
from durable_ops.rpc.errors import domain_error_from_rpc
from durable_ops.worker.failures import WORKER_SHUTDOWN, HandlerFailure, failure_of
from durable_ops.worker.job import Job
from durable_ops.worker.lease import Lease, LeaseStream
from durable_ops.worker.settler import CALL_TIMEOUT_SECONDS, settler

Handler = Callable[[Job], Awaitable[str | None]]
_log = structlog.get_logger(__name__)
FAILED_CLAIM_PAUSE_SECONDS = 0.5


@dataclass(frozen=True)
class WorkerOptions:
    concurrency: int = 10  # jobs running at once
    batch_size: int = 10  # operations per claim, and completions per call
    lease_seconds: int = 30
    claim_wait_seconds: float = 2.0  # how long a claim waits for work (also bounds stop())
    flush_seconds: float = 0.002  # how long a completion waits for others to join it
    heartbeat_after_seconds: float = 1.0  # a job running longer holds its lease by heartbeat
    shutdown_seconds: float = 10.0  # how long stop() lets running jobs finish

    def validated(self) -> WorkerOptions:
        bounds.int_range("concurrency", self.concurrency, (1, 1000))
        bounds.int_range("batch_size", self.batch_size, (1, 100))
        bounds.int_range("lease_seconds", self.lease_seconds, bounds.LEASE_SECONDS_RANGE)
        if self.heartbeat_after_seconds * 3 > self.lease_seconds:
            raise ValueError("heartbeat_after_seconds must leave two thirds of the lease")
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
    ) -> None:
        self._target = target
        self._caller = ServiceCaller(secret, Role.WORKER)
        self.options = (options or WorkerOptions()).validated()
        self._until_empty = until_empty  # stop once a claim finds nothing and no job runs
        self._handlers: dict[str, Handler] = {}
        self._jobs: set[asyncio.Task[None]] = set()
        self._stopping = asyncio.Event()
        self._free = asyncio.Event()
        self.completed = 0
        self.failed = 0

    def handler(self, task_type: str) -> Callable[[Handler], Handler]:
        """``@worker.handler("report.render")`` on ``async def render(job) -> str | None``."""

        def register(function: Handler) -> Handler:
            self._handlers[bounds.task_type(task_type)] = function
            return function

        return register

    def stop(self) -> None:
        """Stop claiming; running jobs get ``shutdown_seconds`` to finish."""
        self._stopping.set()
        self._free.set()

    async def run(self) -> None:
        """Claim and run until ``stop()`` (or, ``until_empty``, until the queue is empty)."""
        if not self._handlers:
            raise ValueError("register a handler first")
        channel = open_channel(self._target)
        self._stub = pb_grpc.OperationsServiceStub(channel)
        self.leases = LeaseStream(lambda: self._stub.HoldLeases(metadata=self._caller.metadata()))
        self._completions = settler(
            self._send_completions, self.options.batch_size, self.options.flush_seconds
        )
        self._failures = settler(
            self._send_failures, self.options.batch_size, self.options.flush_seconds
        )
        try:
            await self._claim_loop()
            await self._finish_running()
            await self._completions.drain()
            await self._failures.drain()
        finally:
            await self.leases.close()
            await channel.close()

    # ---- claiming ----------------------------------------------------------------------------

    async def _claim_loop(self) -> None:
        while not self._stopping.is_set():
            self._free.clear()  # before counting: a job ending from here on wakes the wait
            free = self.options.concurrency - len(self._jobs)
            if free <= 0:
                await self._free.wait()
                continue
            try:
                claimed = await self._claim(min(free, self.options.batch_size))
            except DomainError as error:
                _log.warning("worker_claim_failed", code=error.code)
                await asyncio.sleep(FAILED_CLAIM_PAUSE_SECONDS)
                continue
            if not claimed and self._until_empty:
                if not self._jobs:
                    return
                await self._free.wait()  # a claim without a wait: ask again once a job ends
                continue
            for one in claimed:
                task = asyncio.create_task(self._run_job(Job(one, self._hold)))
                self._jobs.add(task)
                task.add_done_callback(self._job_done)

    async def _claim(self, limit: int) -> Sequence[pb.ClaimedOperation]:
        request = pb.ClaimOperationsRequest(
            task_types=list(self._handlers),
            lease_seconds=self.options.lease_seconds,
            max_operations=limit,
        )
        wait = 0.0 if self._until_empty else self.options.claim_wait_seconds
        request.wait.FromTimedelta(timedelta(seconds=wait))
        try:
            reply = await self._stub.ClaimOperations(
                request, metadata=self._caller.metadata(), timeout=wait + CALL_TIMEOUT_SECONDS
            )
        except grpc.aio.AioRpcError as exc:
            raise domain_error_from_rpc(exc) from exc
        return reply.claimed

    def _job_done(self, task: asyncio.Task[None]) -> None:
        self._jobs.discard(task)
        self._free.set()

    async def _finish_running(self) -> None:
        if not self._jobs:
            return
        _, late = await asyncio.wait(set(self._jobs), timeout=self.options.shutdown_seconds)
        for task in late:
            task.cancel()
        if late:
            await asyncio.gather(*late, return_exceptions=True)

    # ---- one job -----------------------------------------------------------------------------

    async def _run_job(self, job: Job) -> None:
        work: asyncio.Task[str | None] = asyncio.ensure_future(self._handlers[job.task_type](job))
        watch = asyncio.create_task(self._watch(job, work))
        try:
            try:
                result = await asyncio.shield(work)
            except asyncio.CancelledError:
                if not work.done():  # the worker is shutting down: stop the handler first
                    work.cancel()
                    with contextlib.suppress(BaseException):
                        await work
                await self._after_cancel(job)
                return
            except Exception as error:
                await self._fail(job, failure_of(error))
                return
            await self._complete(job, result or "")
        finally:
            watch.cancel()
            if job.lease is not None:
                await job.lease.close()

    async def _watch(self, job: Job, work: asyncio.Task[str | None]) -> None:
        """Hold the lease by heartbeat once the job runs long; cancel the work when it ends."""
        await asyncio.sleep(self.options.heartbeat_after_seconds)
        try:
            lease = job.lease or await self._hold(job)
        except DomainError:  # the first beat found the lease gone
            job.lease_lost = True
            work.cancel()
            return
        await lease.ended.wait()
        if lease.cancel_requested:
            job.cancelled.set()
        job.lease_lost = lease.lost
        work.cancel()

    async def _hold(self, job: Job) -> Lease:
        if job.lease is None:
            job.lease = await Lease.open(self, job, self.options.lease_seconds)
        return job.lease

    async def _after_cancel(self, job: Job) -> None:
        if job.cancelled.is_set():
            await self._acknowledge(job)
        elif job.lease_lost:
            _log.warning("worker_lease_lost", **job.log_fields())
        else:  # stop() ran out of time: release it for another worker now
            await self._fail(job, failure_of(_Shutdown()))

    # ---- settling ----------------------------------------------------------------------------

    async def _complete(self, job: Job, result_ref: str) -> None:
        item = pb.CompleteOperationsRequest.Item(
            owner_id=job.owner_id,
            completion=pb.CompleteOperationRequest(
                operation_id=job.operation_id, lease_token=job.lease_token, result_ref=result_ref
            ),
        )
        outcome = await self._submit(self._completions.submit(item), job, "completion")
        if outcome is not None and not outcome.status_code:
            self.completed += 1

    async def _fail(self, job: Job, failure: HandlerFailure) -> None:
        item = pb.FailOperationsRequest.Item(
            owner_id=job.owner_id,
            failure=pb.FailOperationRequest(
                operation_id=job.operation_id,
                lease_token=job.lease_token,
                retryable=failure.retryable,
                failure_code=failure.code,
                failure_message=failure.message,
            ),
        )
        outcome = await self._submit(self._failures.submit(item), job, "failure")
        if outcome is not None and not outcome.status_code:
            self.failed += 1

    async def _acknowledge(self, job: Job) -> None:
        try:
            await self._stub.AcknowledgeCancellation(
                pb.AcknowledgeCancellationRequest(
                    operation_id=job.operation_id, lease_token=job.lease_token
                ),
                metadata=self._caller.metadata(job.owner_id),
                timeout=CALL_TIMEOUT_SECONDS,
            )
        except grpc.aio.AioRpcError as exc:
            error = domain_error_from_rpc(exc)
            _log.warning("worker_cancel_not_acknowledged", **job.log_fields(), code=error.code)

    @staticmethod
    async def _submit(
        answer: Awaitable[pb.LeaseMutationsResponse.Outcome], job: Job, what: str
    ) -> pb.LeaseMutationsResponse.Outcome | None:
        """A settlement's outcome, logged when refused; ``None`` when it could not be sent
        (the service stayed away): the lease then runs out and the work is tried again."""
        try:
            outcome = await answer
        except Exception as error:
            code = error.code if isinstance(error, DomainError) else type(error).__name__
            _log.warning(f"worker_{what}_not_sent", **job.log_fields(), code=code)
            return None
        if outcome.status_code:
            _log.warning(f"worker_{what}_refused", **job.log_fields(), code=outcome.error_code)
        return outcome

    async def _send_completions(
        self, items: Sequence[pb.CompleteOperationsRequest.Item]
    ) -> pb.LeaseMutationsResponse:
        reply: pb.LeaseMutationsResponse = await self._stub.CompleteOperations(
            pb.CompleteOperationsRequest(items=items),
            metadata=self._caller.metadata(),
            timeout=CALL_TIMEOUT_SECONDS,
        )
        return reply

    async def _send_failures(
        self, items: Sequence[pb.FailOperationsRequest.Item]
    ) -> pb.LeaseMutationsResponse:
        reply: pb.LeaseMutationsResponse = await self._stub.FailOperations(
            pb.FailOperationsRequest(items=items),
            metadata=self._caller.metadata(),
            timeout=CALL_TIMEOUT_SECONDS,
        )
        return reply


class _Shutdown(HandlerFailure):
    def __init__(self) -> None:
        super().__init__(WORKER_SHUTDOWN, "the worker stopped before the job finished")


__all__ = ["Handler", "Worker", "WorkerOptions"]
