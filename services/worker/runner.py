"""The worker: its producer claims, its executor runs each attempt, its completer
settles every end; the attempts' leases share one stream (ADR 0023)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from pathlib import Path

import grpc
import structlog

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.api.operations.v1 import operations_pb2_grpc as pb_grpc
from durable_ops.model import bounds
from durable_ops.model.errors import Unauthenticated
from durable_ops.model.scope import Role
from durable_ops.rpc.client import ServiceCaller, open_channel
from durable_ops.rpc.errors import domain_error_from_rpc
from durable_ops.rpc.keys import SigningKey
from durable_ops.settings import SettingsError
from durable_ops.stop_signals import stopping_on_signals
from durable_ops.worker.attempt import Ending
from durable_ops.worker.completer import CALL_TIMEOUT_SECONDS, Completer
from durable_ops.worker.executor import Classify, Executor, Handler, Interceptor
from durable_ops.worker.failures import failure_of
from durable_ops.worker.lease import HoldLeasesCall, LeaseStream
from durable_ops.worker.producer import Producer, WorkerOptions

_log = structlog.get_logger(__name__)


class Worker:
    """Runs registered handlers for claimed operations of their task types."""

    def __init__(
        self,
        target: str,
        key: SigningKey | str | Path,
        options: WorkerOptions | None = None,
        *,
        until_empty: bool = False,  # stop once a claim finds nothing and no attempt runs
        interceptors: Sequence[Interceptor] = (),
        classify: Classify = failure_of,
        ca: str | Path | None = None,  # what TLS to a target beyond loopback trusts
    ) -> None:
        self._target = target
        self._ca = Path(ca) if ca else None
        self._caller = ServiceCaller(worker_key(key))
        self.options = options = (options or WorkerOptions()).validated()
        self._handlers: dict[str, Handler] = {}
        self._producer = Producer(options, self._handlers, self._claim, until_empty=until_empty)
        self._completer = Completer(self._send, options.batch_size, options.trace_name)
        self.leases = LeaseStream(self._hold_leases)
        self._executor = Executor(
            self._handlers,
            interceptors,
            classify,
            self._completer,
            self.leases,
            options.lease_seconds,
            self._stop_for,
        )
        self._fatal: Exception | None = None  # what stopped the worker, raised by run()

    @property
    def completed(self) -> int:
        """How many attempts this worker completed (the service accepted their completion)."""
        return self._completer.endings[Ending.COMPLETED]

    @property
    def failed(self) -> int:
        """How many attempts this worker failed, retryable or not, or handed to the external
        route. An attempt released at stop, cancelled by its owner, whose lease was lost or
        whose settlement the service refused is counted in neither."""
        return self._completer.endings[Ending.FAILED] + self._completer.endings[Ending.FELL_BACK]

    def handler(self, task_type: str) -> Callable[[Handler], Handler]:
        """``@worker.handler("report.render")`` on ``async def render(attempt) -> str | None``;
        one handler per task type (a second one raises ``ValueError``)."""

        def register(function: Handler) -> Handler:
            bounds.task_type(task_type)
            # A second handler replacing the first would leave one silently unused.
            if task_type in self._handlers:
                raise ValueError(f"a handler for task type {task_type!r} is registered already")
            self._handlers[task_type] = function
            return function

        return register

    def stop(self) -> None:
        """Stop claiming; running attempts get ``shutdown_seconds`` to finish, then are
        cancelled as a shutdown and their leases released in one settlement call (asked
        once: a service that cannot take it leaves it to the lease, and the stop is quick)."""
        self._producer.stop()
        self._completer.stop()

    async def run(self, *, stop_on_signals: bool = True) -> None:
        """Claim and run until ``stop()`` (or, ``until_empty``, until the queue is empty);
        then raise what made an interceptor fail, or the service's refusal of the worker's
        key (``Unauthenticated``, at a claim), if either did. With ``stop_on_signals``,
        SIGTERM and SIGINT call ``stop()`` while it runs (in the main thread), so the
        leases of the running attempts are released, not left to run out."""
        if not self._handlers:
            raise ValueError("register a handler first")
        channel = open_channel(self._target, self._ca)
        self._stub = pb_grpc.OperationsServiceStub(channel)
        signals = stopping_on_signals(self.stop) if stop_on_signals else contextlib.nullcontext()
        # Where it claims, said once: a claim that fails says only why (``unavailable``).
        _log.info("worker_started", target=self._target, task_types=sorted(self._handlers))
        try:
            with signals:
                await self._producer.run(self._executor.run)
                await self._completer.drain()
        finally:
            await self.leases.close()
            await channel.close()
            _log.info("worker_stopped", completed=self.completed, failed=self.failed)
        if self._fatal is not None:
            raise self._fatal

    async def _claim(
        self, request: pb.ClaimOperationsRequest, timeout: float
    ) -> pb.ClaimOperationsResponse:
        try:
            return await self._stub.ClaimOperations(
                request, metadata=self._caller.metadata(), timeout=timeout
            )
        except grpc.aio.AioRpcError as exc:
            error = domain_error_from_rpc(exc)
            if isinstance(error, Unauthenticated):
                # The service no longer takes this worker's key (revoked, or rotated away
                # since it was read): no claim can succeed, so the worker stops and ``run``
                # raises why; restarted, it reads its key file again.
                self._stop_for(error)
            raise error from exc

    def _hold_leases(self) -> HoldLeasesCall:
        return self._stub.HoldLeases(metadata=self._caller.metadata())

    async def _send(
        self, items: Sequence[pb.SettleOperationsRequest.Item]
    ) -> pb.LeaseMutationsResponse:
        return await self._stub.SettleOperations(
            pb.SettleOperationsRequest(items=items),
            metadata=self._caller.metadata(),
            timeout=CALL_TIMEOUT_SECONDS,
        )

    def _stop_for(self, error: Exception) -> None:
        self._fatal = self._fatal or error
        self.stop()


def worker_key(key: SigningKey | str | Path) -> SigningKey:
    """A worker's key, given or read from its file; any other role's key is refused."""
    signing_key = key if isinstance(key, SigningKey) else SigningKey.load(Path(key))
    if signing_key.role is not Role.WORKER:
        raise SettingsError(f"a worker signs with a worker key, not the {signing_key.role} key")
    return signing_key
