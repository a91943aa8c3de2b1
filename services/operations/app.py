"""The Operations application layer: what each call does, in which transaction.

The servicers check the caller's scope and convert messages; each use case
here runs its storage calls in one transaction whose mode it names (the
owner's scope or the neutral one, read or write, short), returns what the
call answers and logs what it changed, once, whichever face was called
(``OperationsService``, ``google.longrunning``). What a transaction changed
is published after its COMMIT (``Database.events``) to the waiters the calls
below wait on: the claim waiters and the watches of operations and of owners
(``operations.watch``). Rules live in ``durable_ops.model``; SQL in
``durable_ops.storage``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import suppress
from datetime import datetime, timedelta
from functools import partial
from typing import TypeVar

import structlog

from durable_ops.clock import Clock
from durable_ops.model import bounds, lifecycle
from durable_ops.model import retention as retention_rules
from durable_ops.model.concurrency_limits import Concurrency
from durable_ops.model.errors import DomainError, InvalidTransition, NotFound
from durable_ops.model.held_leases import HeldLease
from durable_ops.model.lifecycle import Event
from durable_ops.model.operator import OperatorFilter
from durable_ops.model.retention import RetentionPolicy
from durable_ops.model.routing import Route
from durable_ops.model.states import OperationState
from durable_ops.model.tasks import TASKS
from durable_ops.operations.claim_waiters import ClaimWaiters, Kind
from durable_ops.operations.metrics import OperationsMetrics
from durable_ops.operations.pruner import PruneResult, prune
from durable_ops.operations.tuning import TUNING, Tuning
from durable_ops.operations.watch import Watcher, answers, moved, owner_moved
from durable_ops.storage import (
    capacity,
    drafts,
    operations,
    owner_changes,
    retention,
    task_pauses,
    workspace,
)
from durable_ops.storage import operator as store
from durable_ops.storage.db import Database
from durable_ops.storage.events import Changed
from durable_ops.storage.operations import Claim, Held, Settlement, Version
from durable_ops.storage.pages import Page
from durable_ops.storage.schema import OperationAttempt, UserOperation
from durable_ops.storage.task_pauses import Pause
from durable_ops.storage.tx import OperatorTx, Tx

log = structlog.get_logger(__name__)
T = TypeVar("T")
Answer = OperationState | DomainError
_SETTLED = {  # what the log calls each settlement
    Event.COMPLETE: "operation_completed",
    Event.FAIL_RETRYABLE: "operation_failed",
    Event.FAIL_PERMANENT: "operation_failed",
    Event.REQUEST_FALLBACK: "operation_fallback",
    Event.ACKNOWLEDGE_CANCEL: "operation_cancel_acknowledged",
    Event.RELEASE: "operation_released",
}
# In a batch, rare settlements get a line each; the rest are counted.
_LOGGED_ALONE = frozenset({Event.REQUEST_FALLBACK, Event.RELEASE})
# An owner's watch reads again this far behind its cursor (its caller drops what it sent
# already): a change stamped by a replica whose clock lags, and, for a watch from now, one
# committed while the page read what it shows, are not lost.
WATCH_OVERLAP = timedelta(seconds=2)
OwnerChange = tuple[UserOperation, drafts.Draft | None]
# An operator's retry of an analysis whose job or CV was deleted (ADR 65): refused.
SUBJECT_GONE = "subject_gone"


class OperationsApp:
    def __init__(
        self,
        db: Database,
        clock: Clock,
        *,
        tuning: Tuning = TUNING,
        metrics: OperationsMetrics | None = None,
        limits: Mapping[str, Concurrency] | None = None,
    ) -> None:
        self.db = db
        self.clock = clock
        self.metrics = metrics
        self.fair_shares = tuning.fair_shares
        # The registry's concurrency limits (ADR 0048); a test may run other task types.
        self.limits = TASKS.limits() if limits is None else limits
        self.claims = ClaimWaiters(db, clock, tuning.claim_poll_interval_seconds)
        interval = tuning.watch_interval_seconds
        self.watch = Watcher(
            db, "operation_watch", interval, _operation_of, operations.versions_among
        )
        self.owners = Watcher(db, "owner_watch", interval, _owner_of, owner_changes.newest_among)

    async def close(self) -> None:
        await self.claims.close()
        await self.watch.close()
        await self.owners.close()

    # ---- the owner's -------------------------------------------------------------------

    async def create(
        self, owner: str, request: operations.CreateRequest
    ) -> tuple[UserOperation, bool]:
        now = self.clock()
        row, created = await self.db.run_async(
            lambda tx: operations.create(tx, request, now, fair=self.fair_shares),
            owner_id=owner,
            short=True,
        )
        if created:
            log.info("operation_created", operation_id=row.id, owner=owner, task_type=row.task_type)
        return row, created

    async def get(self, owner: str, operation_id: str) -> UserOperation:
        return await self.db.run_async(
            lambda tx: operations.get(tx, operation_id), owner_id=owner, write=False, short=True
        )

    async def wait(
        self,
        owner: str,
        operation_id: str,
        seconds: float,
        seen: datetime | None = None,
        *,
        state_changes: bool = False,
    ) -> UserOperation:
        """The operation once it is done, or differs from ``seen``, or after ``seconds``;
        with ``state_changes`` also once its state differs from the state it had as the wait
        began (our ``WaitOperation`` and the HTTP long-poll, SPEC §5; google.longrunning's
        answers only when done)."""
        loop = asyncio.get_running_loop()
        give_up_at = loop.time() + seconds
        began: OperationState | None = None  # the first read's state, with state_changes
        # Registered before the first read, so a change between the read and the wait wakes it.
        with self.watch.watching(moved(seen, lambda: began), operation_id) as watch:
            while True:
                watch.rearm()
                row = await self.get(owner, operation_id)
                state = OperationState(row.state)
                if state_changes and began is None:
                    began = state
                left = give_up_at - loop.time()
                if left <= 0 or answers(seen, Version(state, row.updated_at), began):
                    return row
                with suppress(TimeoutError):  # then read once more, and answer that
                    async with asyncio.timeout(left):
                        await watch.event.wait()

    async def draft(self, owner: str, operation_id: str) -> drafts.Draft:
        """The running attempt's answer so far (NOT_FOUND ``draft_not_found`` when none)."""
        return await self.db.run_async(
            lambda tx: drafts.get(tx, operation_id), owner_id=owner, write=False, short=True
        )

    async def owner_changes(
        self, owner: str, after: datetime | None
    ) -> AsyncIterator[list[OwnerChange]]:
        """The owner's operations as they change, from ``after`` (inclusive; None: now) on,
        each with its running attempt's draft: batches, oldest change first, for ever.
        A change is yielded once it differs from what this watch last yielded of that
        operation (a plain beat moves ``updated_at`` and nothing the owner sees)."""

        def read(tx: Tx, cursor: datetime, after_id: str) -> list[OwnerChange]:
            rows = owner_changes.since(tx, cursor, after_id)
            running = [row.id for row in rows if row.state == OperationState.RUNNING]
            found = drafts.current(tx, running)
            return [(row, found.get(row.id)) for row in rows]

        # A cursor ahead of this replica's clock (another's clock ran ahead, or a client made
        # it up) would hide every change until the clock caught up: nothing is newer than now.
        now = self.clock()
        cursor = now if after is None else min(after, now)
        overlap = WATCH_OVERLAP
        after_id = ""  # a full read ended at the cursor's time on this operation: read past it
        sent: dict[str, tuple[object, ...]] = {}  # what this watch last yielded of each
        # Registered before the first read, so a change between a read and the wait wakes it.
        with self.owners.watching(owner_moved(), owner) as watch:
            while True:
                watch.rearm()
                start = cursor - overlap
                batch = await self.db.run_async(
                    partial(read, cursor=start, after_id=after_id),
                    owner_id=owner,
                    write=False,
                    short=True,
                )
                if batch:
                    seen = {row.id: _seen(row, draft) for row, draft in batch}
                    fresh = [each for each in batch if sent.get(each[0].id) != seen[each[0].id]]
                    sent.update(seen)
                    if fresh:
                        yield fresh
                    last = batch[-1][0]
                    if len(batch) == owner_changes.CHANGES_MAX:  # more to read, from the last
                        # on, past it by its id: one UPDATE (a sweep's) can write more than a
                        # read takes in one microsecond, and stepping past that microsecond
                        # lost the rest of them
                        if last.updated_at >= cursor:
                            cursor, after_id = last.updated_at, last.id
                        overlap = timedelta(0)
                        continue
                    cursor = max(cursor, last.updated_at)
                after_id = ""
                overlap = WATCH_OVERLAP
                await watch.event.wait()

    async def list_page(
        self, owner: str, *, size: int, token: str, state: OperationState | None, task_type: str
    ) -> Page[UserOperation]:
        return await self.db.run_async(
            lambda tx: operations.list_page(
                tx, size=size, token=token, state=state, task_type=task_type
            ),
            owner_id=owner,
            write=False,
        )

    async def cancel(
        self, owner: str, operation_id: str, check: Callable[[str], None]
    ) -> UserOperation:
        """``check``: raises when the caller may not cancel an operation of this task type."""
        now = self.clock()
        row = await self.db.run_async(
            lambda tx: operations.cancel(tx, operation_id, now, lambda op: check(op.task_type)),
            owner_id=owner,
            short=True,
        )
        log.info("operation_cancel", operation_id=row.id, owner=owner, state=row.state)
        return row

    async def retry(
        self, owner: str, operation_id: str, check: Callable[[str], None]
    ) -> UserOperation:
        """``check``: raises when the caller may not retry an operation of this task type."""
        now = self.clock()
        row = await self.db.run_async(
            lambda tx: operations.retry(tx, operation_id, now, lambda op: check(op.task_type)),
            owner_id=owner,
            short=True,
        )
        log.info("operation_retried", operation_id=row.id, owner=owner)
        return row

    async def delete(self, owner: str, operation_id: str, check: Callable[[str], None]) -> None:
        """The owner's finished operation removed; its tombstone keeps the key (ADR 0021).
        ``check``: raises when the caller may not delete an operation of this task type."""
        now = self.clock()
        await self.db.run_async(
            lambda tx: retention.delete_finished(tx, operation_id, now, check), owner_id=owner
        )
        log.info("operation_delete", operation_id=operation_id, owner=owner)

    # ---- the worker's --------------------------------------------------------------------

    async def claim(
        self,
        task_types: Sequence[str],
        lease_seconds: int,
        routes: Sequence[Route],
        wait: float,
        limit: int,
    ) -> list[tuple[Claim, Route]]:
        """Up to ``limit`` claims over ``routes`` in order, in one transaction; waits up
        to ``wait`` seconds for the first, woken by this replica's claim waiters. One
        claim transaction runs at a time on the replica (ADR 0024)."""
        names = bounds.claim_task_types(task_types)
        kinds: frozenset[Kind] = frozenset(
            (_claim_source(route).value, name) for route in routes for name in names
        )

        def take(tx: Tx) -> list[tuple[Claim, Route]]:
            now = self.clock()
            found: list[tuple[Claim, Route]] = []
            for route in routes:
                batch = operations.claim(
                    tx,
                    names,
                    lease_seconds,
                    now,
                    limit=limit - len(found),
                    external_route=route is Route.EXTERNAL,
                    limits=self.limits,
                )
                found += [(claim, route) for claim in batch]
                if len(found) == limit:
                    break
            return found

        loop = asyncio.get_running_loop()
        give_up_at = loop.time() + wait
        with self.claims.waiting(kinds, limit) as waiter:
            while True:
                async with self.claims.turn():
                    waiter.trying()
                    found = await self.db.run_async(take, owner_id=None, short=True)
                    self.claims.took(waiter, len(found))
                left = give_up_at - loop.time()
                if found or left <= 0 or not names or not await waiter.wait(left):
                    break
        if len(found) == 1:
            row = found[0][0].operation
            log.info(
                "operation_claimed",
                operation_id=row.id,
                owner=row.owner_user_id,
                attempt=row.attempt,
            )
        elif found:  # a batch is one line, not one a claim
            log.info("operations_claimed", count=len(found))
        if self.metrics is not None:
            for claim, route in found:
                self.metrics.claimed(claim.operation.task_type, route.value)
        return found

    async def settle(self, settlements: list[Settlement]) -> list[Answer]:
        """Settle leases of many owners in one transaction, in the neutral scope; answer each
        alone."""
        now = self.clock()
        answers = await self.db.run_async(
            lambda tx: operations.settle(tx, settlements, now), owner_id=None, short=True
        )
        refused = sum(isinstance(answer, DomainError) for answer in answers)
        log.info("operations_settled", count=len(answers), refused=refused)
        for item, answer in zip(settlements, answers, strict=True):
            if item.event in _LOGGED_ALONE and not isinstance(answer, DomainError):
                log.info(_SETTLED[item.event], operation_id=item.operation_id, owner=item.owner_id)
        return answers

    async def settle_one(self, settlement: Settlement) -> OperationState:
        """One lease of its owner's, settled in the owner's scope; a refusal raised."""
        now = self.clock()
        state = await self.db.run_async(
            lambda tx: operations.settle_one(tx, settlement, now),
            owner_id=settlement.owner_id,
            short=True,
        )
        log.info(
            _SETTLED[settlement.event],
            operation_id=settlement.operation_id,
            owner=settlement.owner_id,
            state=state,
            failure_code=settlement.failure_code or None,
        )
        return state

    async def beat(self, lease: HeldLease) -> Held:
        """One lease extended in its owner's scope; a refusal raised."""
        now = self.clock()
        return await self.db.run_async(
            lambda tx: operations.heartbeat(tx, lease, now), owner_id=lease.owner_id, short=True
        )

    async def extend(self, leases: list[HeldLease]) -> list[Held | DomainError]:
        """Many leases of many owners extended in one transaction; each answered alone."""
        if not leases:
            return []
        now = self.clock()
        return await self.db.run_async(
            lambda tx: operations.extend(tx, leases, now), owner_id=None, short=True
        )

    # ---- the operator's (ADR 19) ---------------------------------------------------------

    async def inspect(
        self, *, size: int, token: str, filters: OperatorFilter
    ) -> Page[UserOperation]:
        now = self.clock()
        page = partial(store.list_page, size=size, token=token, filters=filters, now=now)
        return await self._as_operator(page, write=False)

    async def show(self, operation_id: str) -> tuple[UserOperation, list[OperationAttempt]]:
        return await self._as_operator(partial(store.show, operation_id=operation_id), write=False)

    async def queue_depths(self) -> list[store.QueueDepth]:
        return await self._as_operator(partial(store.queue_depths, now=self.clock()), write=False)

    async def force_cancel(self, operation_id: str) -> UserOperation:
        return await self._as_operator(
            partial(store.cancel, operation_id=operation_id, now=self.clock())
        )

    async def force_retry(self, operation_id: str) -> UserOperation:
        return await self._as_operator(
            partial(operator_retry, operation_id=operation_id, now=self.clock())
        )

    async def pause_task_type(self, task_type: str, by: str) -> tuple[Pause | None, bool]:
        """Pause ``task_type`` (ADR 0047): its pause, and whether this call made it."""
        now = self.clock()

        def pause(tx: Tx) -> tuple[Pause | None, bool]:
            changed = task_pauses.pause(tx, task_type, by, now)
            return task_pauses.find(tx, task_type), changed

        return await self.db.run_async(pause, owner_id=None)

    async def resume_task_type(self, task_type: str) -> bool:
        """Resume ``task_type``: whether it was paused."""
        return await self.db.run_async(lambda tx: task_pauses.resume(tx, task_type), owner_id=None)

    async def paused_task_types(self) -> list[Pause]:
        return await self.db.run_async(task_pauses.paused, owner_id=None, write=False)

    async def prune(
        self, policy: RetentionPolicy, batch: int, now: datetime, *, dry_run: bool
    ) -> PruneResult:
        """What is past the horizons: counted (``dry_run``), or pruned in batches."""
        if not dry_run:
            return await prune(
                self.db,
                self.clock,
                policy,
                batch,
                seconds=retention_rules.PRUNE_CALL_SECONDS,
                metrics=self.metrics,
            )
        found = await self._as_operator(
            partial(retention.prunable, policy=policy, now=now), write=False
        )
        return PruneResult(found.operations, found.tombstones, more=False)

    async def _as_operator(self, work: Callable[[OperatorTx], T], *, write: bool = True) -> T:
        """One transaction in the operator's scope (ADR 19): any owner's rows, by ``OperatorTx``."""
        return await self.db.run_async(lambda tx: work(OperatorTx(tx)), owner_id=None, write=write)


def operator_retry(tx: OperatorTx, operation_id: str, now: datetime) -> UserOperation:
    """The owner's retry, as the operator (ADR 19), refused ``subject_gone`` for an analysis
    whose job or CV was deleted since (ADR 65): the owner's own retry (admission) is refused
    then, and queued, it would only be failed ``subject_not_found`` by the worker, its owner
    told again of an analysis of something they deleted. Read under the lock an admission
    and a delete take, writing its row as they do (Galera), so a racing delete goes wholly
    before or after (ADR 60). Other task types' subjects are opaque here."""
    scope = tx.as_owner(store.owner_of(tx, operation_id))
    op = operations.get(scope, operation_id)
    if op.task_type in TASKS and op.state in lifecycle.RETRYABLE_STATES:
        task = TASKS.get(op.task_type)
        capacity.lock_control(scope)
        for kind, ref in ((task.subject, op.subject_id), (task.context, op.context_ref)):
            if kind is None or not ref:
                continue
            try:
                workspace.get_subject(scope, kind, ref)
            except NotFound:
                message = f"the {kind.label} it reads was deleted: it cannot run again"
                raise InvalidTransition(message, code=SUBJECT_GONE) from None
        capacity.reserve(scope)
    return store.retry(tx, operation_id, now)


def _claim_source(route: Route) -> OperationState:
    event = Event.CLAIM_EXTERNAL if route is Route.EXTERNAL else Event.CLAIM
    return lifecycle.CLAIMS[event].source


def _operation_of(change: Changed) -> str:
    return change.operation_id


def _owner_of(change: Changed) -> str:
    return change.owner_id


def _seen(row: UserOperation, draft: drafts.Draft | None) -> tuple[object, ...]:
    """What the owner sees of one change: the operation's visible fields, its draft's version."""
    return (
        row.state,
        row.progress_percent,
        row.cancel_requested,
        row.attempt,
        row.finished_at,
        None if draft is None else (draft.attempt, draft.updated_at),
    )
