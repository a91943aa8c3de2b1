"""A handler's unit test, with no services: as Temporal's ``ActivityEnvironment`` runs one
activity in-process.

    test = HandlerTest("report.render", Subject("report", "q3"))
    run = await test.run(render)
    assert run.outcome == Completed("reports/op-1.pdf") and run.progress == (50,)

``HandlerTest`` runs a handler on an ``Attempt`` made from the claim it describes, its
lease in memory: ``attempt.hold()`` and every beat are answered at once, and what the
handler reports is recorded. The owner's cancel, the worker's shutdown or a lost lease
come when the test asks (``cancel()``, ``shut_down()``, ``lose_lease()``: at once while
the handler runs, or once it reports ``at_progress`` or more; asked before the run, the
lease says so from its first beat and the handler is cancelled at its first wait), and
reach the handler as the worker delivers them: its task is cancelled. The outcome is
decided by the worker's own rule (``executor.outcome_of``), and its ending is the one
its settlement asks for (``completer.settlement_item``), so a test and the worker cannot
disagree; only the service's refusals (a fallback the task or the owner does not allow,
a lease that ran out) are not played.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import Enum

from durable_ops.model.errors import DomainError, LeaseLost
from durable_ops.model.routing import Route
from durable_ops.model.states import Privacy
from durable_ops.model.usage import Usage
from durable_ops.worker.attempt import Attempt, Claimed, Ending, ModelCall, Subject
from durable_ops.worker.completer import Outcome, settlement_item
from durable_ops.worker.executor import Classify, Handler, Returned, lease_ended, outcome_of
from durable_ops.worker.failures import HandlerFailure, failure_of
from durable_ops.worker.lease import HeldOperation, Lease

__all__ = ["HandlerRun", "HandlerTest", "Outcome"]


A_SUBJECT = Subject("test", "s-1")
LEASE_TOKEN = "test-lease"  # noqa: S105  # nothing checks it: no service sees this lease


class _Stop(Enum):
    CANCEL = "the owner's cancel"
    SHUTDOWN = "the worker's shutdown"
    LEASE_LOST = "a lost lease"


@dataclass(frozen=True)
class HandlerRun:
    """How one run of a handler ended, and what it reported on the way."""

    attempt: Attempt  # as the worker leaves it: ``result``, ``cancelled``, ``shutting_down``…
    # What the worker settles: ``Completed``, a ``HandlerFailure`` (an ``InvalidHandlerCall``
    # as its ``invalid_handler_call`` failure), an ``ExternalFallback``, ``WorkerShutdown``
    # (released) or ``Ending.CANCELLED``; None settles nothing (the lease was lost).
    outcome: Outcome | None
    raised: BaseException | None  # what the handler raised (``CancelledError``: let through)
    progress: tuple[int, ...]  # each percent reported, in order, as the handler passed it
    text: str  # the answer so far, as last reported on the lease ("" when none)
    held: bool  # whether the handler held its lease (``hold()``, ``progress``)

    @property
    def ending(self) -> Ending | None:
        """What the settlement asks the service to record (None: nothing is settled)."""
        return self.attempt.ending

    @property
    def failure(self) -> HandlerFailure | None:
        """The failure the attempt settles as (``code``, ``retryable``, ``message``,
        ``retry_after``), if any."""
        return self.outcome if isinstance(self.outcome, HandlerFailure) else None

    @property
    def calls(self) -> tuple[ModelCall, ...]:
        """What ``attempt.used`` recorded, in order."""
        return tuple(self.attempt.calls)

    @property
    def usage(self) -> Usage | None:
        """Their sum, as the settlement carries it; None when nothing was recorded."""
        return self.attempt.usage


class HandlerTest:
    """Runs a handler on an attempt of the claim it describes, with no services."""

    def __init__(
        self,
        task_type: str = "test.task",
        subject: Subject = A_SUBJECT,
        *,
        number: int = 1,
        route: Route = Route.LOCAL,
        privacy: Privacy = Privacy.LOCAL_ONLY,
        context_ref: str = "",
        operation_id: str = "op-1",
        owner_id: str = "owner-1",
        trace_parent: str = "",
        lease_seconds: int = 30,
        classify: Classify = failure_of,  # as ``Worker(classify=...)``
    ) -> None:
        self.claimed = Claimed(
            operation_id=operation_id,
            owner_id=owner_id,
            task_type=task_type,
            subject=subject,
            number=number,
            context_ref=context_ref,
            route=route,
            privacy=privacy,
            trace_parent=trace_parent,
            lease_token=LEASE_TOKEN,
            lease_expires_at=datetime.now(UTC) + timedelta(seconds=lease_seconds),
        )
        self._lease_seconds = lease_seconds
        self._classify = classify
        self._requests: list[tuple[_Stop, int | None]] = []  # at a progress, or (None) at once
        self._leases: _Leases | None = None  # while a handler runs

    def cancel(self, *, at_progress: int | None = None) -> None:
        """The owner cancels: ``attempt.cancelled`` is set and the handler's task cancelled
        (at once, or once it reports ``at_progress`` or more)."""
        self._request(_Stop.CANCEL, at_progress)

    def shut_down(self, *, at_progress: int | None = None) -> None:
        """The worker stops and its grace is over: ``attempt.shutting_down`` is true and the
        handler's task cancelled; the attempt is released, whatever the handler does then."""
        self._request(_Stop.SHUTDOWN, at_progress)

    def lose_lease(self, *, at_progress: int | None = None) -> None:
        """The lease runs out or moves on: ``hold()`` raises ``LeaseLost``, the handler's task
        is cancelled, and nothing is settled."""
        self._request(_Stop.LEASE_LOST, at_progress)

    async def run(self, handler: Handler) -> HandlerRun:
        """Run ``handler`` to its end on a new attempt; the requests made so far, and those
        made while it runs, are this attempt's."""
        if self._leases is not None:
            raise RuntimeError("this HandlerTest runs a handler already")
        leases = self._leases = _Leases(self.claimed, self._lease_seconds)
        attempt = Attempt(self.claimed, leases, self._lease_seconds)
        if (stop := self._due([])) is not None and stop is not _Stop.SHUTDOWN:
            leases.lease.end(_lease_end(stop))  # what the lease's first beat will say
        work = asyncio.ensure_future(handler(attempt))
        # Made after the handler's task, so that the handler runs to its first wait first.
        watch = asyncio.create_task(self._watch(leases, attempt, work))
        try:
            await asyncio.wait({work})
        except asyncio.CancelledError:  # the test itself was cancelled (its timeout)
            work.cancel()
            raise
        finally:
            watch.cancel()
            self._leases = None
            self._requests.clear()
        raised = asyncio.CancelledError() if work.cancelled() else work.exception()
        if raised is not None and not isinstance(raised, Exception | asyncio.CancelledError):
            raise raised  # SystemExit and the like end the worker too, not only the attempt
        held = leases.held if leases.held is not None else attempt.lease is not None
        # The worker settles a shutdown as one, whatever the handler did once it was told.
        ended = asyncio.CancelledError() if attempt.shutting_down else raised
        returned = work.result() if ended is None else None
        outcome = outcome_of(attempt, self._classify, returned=returned, raised=ended)
        if outcome is not None:
            _, attempt.ending = settlement_item(attempt, outcome, attempt.usage)
        return HandlerRun(attempt, outcome, raised, tuple(leases.progress), leases.text, held)

    def _request(self, stop: _Stop, at_progress: int | None) -> None:
        self._requests.append((stop, at_progress))
        if self._leases is not None:
            self._leases.news.set()

    def _due(self, reported: list[int]) -> _Stop | None:
        for stop, at_progress in self._requests:
            if at_progress is None or any(p >= at_progress for p in reported):
                return stop
        return None

    async def _watch(
        self, leases: _Leases, attempt: Attempt, work: asyncio.Future[Returned]
    ) -> None:
        """Deliver the first request that is due, as the worker's executor would."""
        while (stop := self._due(leases.progress)) is None:
            leases.news.clear()
            await leases.news.wait()
        if work.done():
            return
        if stop is _Stop.SHUTDOWN:
            attempt.shutting_down = True
        else:
            leases.lease.end(_lease_end(stop))
            # The worker's watch holds the lease of an attempt that runs on: its end shows there.
            leases.held = attempt.lease is not None
            await lease_ended(attempt)
        work.cancel()


def _lease_end(stop: _Stop) -> DomainError | None:
    return LeaseLost("the lease was lost") if stop is _Stop.LEASE_LOST else None


class _Leases:
    """The lease side in memory: every beat answered at once, what is reported recorded."""

    def __init__(self, claimed: Claimed, lease_seconds: int) -> None:
        self.progress: list[int] = []
        self.text = ""
        self.news = asyncio.Event()  # a request or a progress
        self.held: bool | None = None  # whether the handler held the lease, once the watch did
        # The attempt's one lease, answered at once; its end, once asked, is its next answer.
        self.lease = _Lease(self, claimed, lease_seconds)
        self.lease.held(time.monotonic())

    def join(self, op: HeldOperation, lease_seconds: int) -> Lease:
        return self.lease

    def leave(self, lease: Lease) -> None:
        pass  # nothing is extended: nothing to stop

    def beat_soon(self, *, now: bool = False) -> None:
        if now and not self.lease.ended.is_set():
            self.lease.held(time.monotonic())  # a beat asked for (``confirm``), answered


class _Lease(Lease):
    """The SDK's own ``Lease``, recording what the handler reports on it."""

    _stream: _Leases

    def report_progress(self, percent: int) -> None:
        self._stream.progress.append(percent)
        self._stream.news.set()
        super().report_progress(percent)

    def report_text(self, text: str) -> None:
        self._stream.text = text
        super().report_text(text)
