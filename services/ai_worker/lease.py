"""The heartbeat stream that holds one claimed operation's lease.

The first beat names the lease and the lease length; its answer says whether
the owner already asked to cancel. A background task then beats every third
of the lease, so at least two beats land in every lease window, for as long
as the work runs. ``ended`` is set when an answer asks to cancel or the lease
is lost (an ABORTED answer, a broken stream, or no answer within a lease
window): the executor then stops the work and, having lost the lease,
publishes nothing. Temporal does the same: a failed heartbeat cancels the
activity.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import grpc
import structlog

from durable_ops.ai_worker.claims import ClaimedOperation
from durable_ops.ai_worker.clients import HeartbeatCall, OperationsClient
from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.model.errors import DomainError, LeaseLost
from durable_ops.rpc.errors import domain_error_from_rpc

BEATS_PER_LEASE = 3
CLOSE_TIMEOUT_SECONDS = 2.0

_log = structlog.get_logger(__name__)


class Lease:
    def __init__(
        self,
        call: HeartbeatCall,
        op: ClaimedOperation,
        lease_seconds: int,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._call = call
        self._op = op
        self.lease_seconds = lease_seconds
        self.interval = lease_seconds / BEATS_PER_LEASE
        self._clock = clock
        self.cancel_requested = False
        self.lost = False
        self.ended = asyncio.Event()
        self._held_until = 0.0  # local estimate: when the last confirmed beat was sent + lease
        self._exchange = asyncio.Lock()  # one beat in flight at a time on the stream
        self._keeper: asyncio.Task[None] | None = None
        self._closed = False

    @classmethod
    async def open(
        cls, operations: OperationsClient, op: ClaimedOperation, lease_seconds: int
    ) -> Lease:
        """Open the stream and send the first beat; ``LeaseLost`` if the lease is gone."""
        lease = cls(operations.heartbeat_stream(op.owner_id), op, lease_seconds)
        try:
            await lease._beat(first=True)
        except BaseException:
            lease._call.cancel()
            raise
        if not lease.cancel_requested:
            lease._keeper = asyncio.create_task(lease._keep_alive())
        return lease

    async def confirm(self) -> None:
        """Make sure the lease has at least two thirds of its window left, else beat now.

        Called before publishing: the keeper normally guarantees it, unless the
        event loop or the service was slow.
        """
        if self.lost:
            raise LeaseLost("the lease was lost")
        if self._held_until - self._clock() < self.lease_seconds - self.interval:
            try:
                await self._beat()
            except DomainError:
                self._end(lost=True)
                raise

    async def close(self) -> None:
        """Stop beating and end the stream; safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        if self._keeper is not None:
            self._keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keeper
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT_SECONDS):
                await self._call.done_writing()
                while await self._call.read() is not grpc.aio.EOF:
                    pass
        except (grpc.aio.AioRpcError, TimeoutError, grpc.aio.UsageError):
            self._call.cancel()

    async def _keep_alive(self) -> None:
        try:
            while True:
                await asyncio.sleep(self.interval)
                await self._beat()
                if self.cancel_requested:
                    return
        except DomainError as error:
            _log.warning("lease_lost", **self._op.log_fields(), code=error.code)
            self._end(lost=True)
        except Exception as error:  # any broken stream means the lease cannot be vouched for
            _log.warning("lease_lost", **self._op.log_fields(), code=type(error).__name__)
            self._end(lost=True)

    async def _beat(self, *, first: bool = False) -> None:
        request = (
            pb.HeartbeatRequest(
                operation_id=self._op.operation_id,
                lease_token=self._op.lease_token,
                lease_seconds=self.lease_seconds,
            )
            if first
            else pb.HeartbeatRequest()
        )
        async with self._exchange:
            sent = self._clock()
            try:
                async with asyncio.timeout(self.lease_seconds):
                    await self._call.write(request)
                    answer = await self._call.read()
            except grpc.aio.AioRpcError as exc:
                raise domain_error_from_rpc(exc) from exc
            except (grpc.aio.UsageError, asyncio.InvalidStateError) as exc:
                raise LeaseLost("the heartbeat stream is closed") from exc
            except TimeoutError:
                raise LeaseLost("no heartbeat answer within a lease window") from None
            if not isinstance(answer, pb.HeartbeatResponse):  # grpc.aio.EOF
                raise LeaseLost("the heartbeat stream ended")
            self._held_until = sent + self.lease_seconds
            if answer.cancel_requested:
                self.cancel_requested = True
                self._end(lost=False)

    def _end(self, *, lost: bool) -> None:
        self.lost = self.lost or lost
        self.ended.set()
