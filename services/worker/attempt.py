"""One attempt at a claimed operation, as a handler sees it: what to work on, progress,
cancellation. The SDK's own types: no protobuf message leaves ``durable_ops.worker``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import TypeVar

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.model import bounds
from durable_ops.model.provenance import Provenance
from durable_ops.model.routing import Route
from durable_ops.model.states import Privacy
from durable_ops.model.usage import Usage, total
from durable_ops.rpc.states import route_from_pb
from durable_ops.worker.failures import Completed, handler_call
from durable_ops.worker.lease import Lease, Leases

T = TypeVar("T")


class Ending(StrEnum):
    """What the service accepted as an attempt's end."""

    COMPLETED = "completed"
    FAILED = "failed"  # retryable or not
    FELL_BACK = "fell_back"  # waiting for an external-route worker
    CANCELLED = "cancelled"  # the owner's cancel, acknowledged
    RELEASED = "released"  # the worker stopped first: queued again, the attempt not spent


@dataclass(frozen=True)
class ModelCall:
    """What one model call used, and which model on which route spent it."""

    usage: Usage
    provenance: Provenance


@dataclass(frozen=True)
class Subject:
    """What the operation is about: a kind and an id of the owner's (``job``, ``cv``…)."""

    type: str
    id: str


def privacy_from_pb(value: pb.Privacy.ValueType) -> Privacy:
    """Unspecified is the stricter choice (the proto says so)."""
    return Privacy.EXTERNAL_ALLOWED if value == pb.PRIVACY_EXTERNAL_ALLOWED else Privacy.LOCAL_ONLY


@dataclass(frozen=True)
class Claimed:
    """What a claim handed this worker: the operation, its owner, and its lease."""

    operation_id: str
    owner_id: str
    task_type: str
    subject: Subject
    number: int  # which attempt of the operation this is, from 1
    context_ref: str  # an optional second reference ("" when none)
    route: Route  # which of the worker's routes the claim took it for (external: a fallback)
    privacy: Privacy  # the owner's privacy choice as admission saw it
    trace_parent: str  # the creating request's W3C traceparent ("" untraced)
    lease_token: str = field(repr=False)
    lease_expires_at: datetime

    @classmethod
    def from_pb(cls, claimed: pb.ClaimedOperation) -> Claimed:
        operation = claimed.operation
        return cls(
            operation_id=operation.id,
            owner_id=claimed.owner_id,
            task_type=operation.task_type,
            subject=Subject(operation.subject.type, operation.subject.id),
            number=operation.attempt,
            context_ref=claimed.context_ref,
            route=route_from_pb(claimed.route),
            privacy=privacy_from_pb(claimed.privacy),
            trace_parent=claimed.trace_parent,
            lease_token=claimed.lease_token,
            lease_expires_at=claimed.lease_expires_at.ToDatetime(tzinfo=UTC),
        )

    def log_fields(self) -> dict[str, object]:
        """What a log line may say about the attempt (ids only, never content)."""
        return {
            "operation_id": self.operation_id,
            "owner": self.owner_id,
            "task_type": self.task_type,
            "attempt": self.number,
            "route": self.route.value,
        }


class Attempt(Claimed):
    """The claimed operation (its fields stay frozen) while a handler works on it.

    ``cancelled`` is set when the owner's cancel arrives, and the handler's task
    is cancelled with it; ``shutting_down`` is true instead when the worker's stop
    cancels it (the attempt is then released, not cancelled). Once it ended,
    ``result`` is what the handler returned and ``ending`` what the service
    accepted (``None``: the lease was lost, or the settlement refused or never
    answered).
    """

    def __init__(self, claimed: Claimed, leases: Leases, lease_seconds: int) -> None:
        super().__init__(**vars(claimed))
        # A frozen dataclass lets a subclass set attributes that are not its fields.
        self._leases = leases
        self._lease_seconds = lease_seconds
        self._taken_at = time.monotonic()  # the claim's answer came just before
        self.cancelled = asyncio.Event()
        self.shutting_down = False
        self.joined = asyncio.Event()  # ``lease`` is set: the lease is on the stream
        self.lease: Lease | None = None
        self.result: Completed | None = None
        self.ending: Ending | None = None
        self.calls: list[ModelCall] = []  # what ``used`` recorded, in order

    def used(self, usage: Usage, provenance: Provenance) -> None:
        """Record what one model call of this attempt used, and which model on which route.

        Whatever the attempt's end (a failure, a release or a cancel too), its settlement
        carries the sum: the service keeps it on the attempt and adds it to the operation's
        totals. A call that reached no model records nothing. A figure beyond what one
        settlement may carry raises ``InvalidHandlerCall`` here, in the handler.
        """
        with handler_call():
            usage.checked()
        self.calls.append(ModelCall(usage, provenance))

    @property
    def usage(self) -> Usage | None:
        """The sum of what ``used`` recorded; None when nothing was."""
        return total([call.usage for call in self.calls])

    @property
    def live_until(self) -> float:
        """When its lease runs out by this worker's reckoning (``time.monotonic``): the lease
        stream's, once it held the lease there; else a lease from the claim, a few
        milliseconds before it came."""
        if self.lease is None:
            return self._taken_at + self._lease_seconds
        return self.lease.live_until

    @property
    def completed(self) -> bool:
        """Whether the service accepted this attempt's completion."""
        return self.ending is Ending.COMPLETED

    @property
    def lease_lost(self) -> bool:
        """The lease expired or moved on: the work is no longer ours, and nothing is settled."""
        return self.lease is not None and self.lease.lost

    async def hold(self) -> Lease:
        """Hold the lease on the worker's lease stream from now on (``LeaseLost`` if it is
        gone). The first beat says whether the owner already cancelled: a handler that holds
        it before expensive work starts none for a cancelled operation."""
        if self.lease is None:
            self.lease = self._leases.join(self, self._lease_seconds)
            self.joined.set()
        return await self.lease.ready()

    async def progress(self, percent: int) -> None:
        """Report ``percent`` to the owner: 0 to 100 (``InvalidHandlerCall`` beyond, raised
        here in the handler), shown at most 99 until the operation completes; a value
        below one reported before is not shown (progress never goes back)."""
        with handler_call():
            bounds.int_range("progress_percent", percent, bounds.PROGRESS_RANGE)
        lease = await self.hold()
        lease.report_progress(percent)

    async def fenced(self, write: Awaitable[T]) -> T:
        """Run ``write``, a call the service fences on this lease, to its answer even if a
        cancel arrives meanwhile: the answer says which came first (``LeaseLost``, code
        ``cancel_requested``), and a write that went through stands."""
        call = asyncio.ensure_future(write)
        while not call.done():
            try:
                await asyncio.wait({call})  # never cancels the call, never raises its error
            except asyncio.CancelledError:
                if task := asyncio.current_task():
                    task.uncancel()
        return call.result()
