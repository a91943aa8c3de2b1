"""One claimed operation as a handler sees it: what to work on, progress, cancellation."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.worker.lease import Lease


@dataclass(eq=False)
class Job:
    """A claimed operation, held by its lease for as long as the handler runs.

    ``progress`` reports 0 to 99 to the owner (the worker's lease stream carries
    it, at most about once a second). ``cancelled`` is set when the owner's
    cancel reaches the worker; the handler's task is cancelled at the same time,
    so a handler that awaits anything stops there unless it catches it.
    """

    claimed: pb.ClaimedOperation = field(repr=False)
    _hold: Callable[[Job], Awaitable[Lease]] = field(repr=False)
    cancelled: asyncio.Event = field(default_factory=asyncio.Event, repr=False)
    lease: Lease | None = field(default=None, repr=False)
    lease_lost: bool = False  # the lease expired or moved on: the work is no longer ours

    @property
    def operation(self) -> pb.Operation:
        return self.claimed.operation

    @property
    def operation_id(self) -> str:
        return self.claimed.operation.id

    @property
    def owner_id(self) -> str:
        return self.claimed.owner_id

    @property
    def lease_token(self) -> str:
        return self.claimed.lease_token

    @property
    def task_type(self) -> str:
        return self.claimed.operation.task_type

    @property
    def subject(self) -> pb.Subject:
        return self.claimed.operation.subject

    @property
    def context_ref(self) -> str:
        return self.claimed.context_ref

    @property
    def attempt(self) -> int:
        return self.claimed.operation.attempt

    async def progress(self, percent: int) -> None:
        """Report ``percent`` (0 to 99, never decreasing) to the owner."""
        lease = self.lease or await self._hold(self)
        lease.report_progress(percent)

    def log_fields(self) -> dict[str, object]:
        """What a log line may say about the job (ids only, never content)."""
        return {
            "operation_id": self.operation_id,
            "owner": self.owner_id,
            "task_type": self.task_type,
            "attempt": self.attempt,
        }
