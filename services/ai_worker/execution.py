"""One claimed operation, from the first heartbeat to its terminal call.

    first beat ─ cancel requested? ── acknowledge
        │
    produce (cancellable):  entitlement and privacy re-checked from live settings
        │                   → the handler reads the owner's texts → one structured
        │                   request (local, or external for a fallback claim)
        │                   → the answer validated and turned into the note body
        │                   (the streamed answer's progress goes out on the heartbeat)
        ├─ the stream says cancel ──── abort the model request, acknowledge
        ├─ the stream lost the lease ─ stop the work, publish nothing
        ├─ the worker is shutting down ─ stop the work, fail retryable
        ├─ it raised ────────────────── fallback / fail (``failures.classify``)
        │
    confirm the lease → publish the note under the lease → complete
                           ├─ refused, cancel requested ── acknowledge
                           └─ refused, lease lost ──────── publish nothing

Cancel wins until the note is published: Workspace checks the lease and the
cancel flag in the transaction that writes the note. After that, completion
goes ahead and the operation succeeds although the owner asked to cancel.

Every lease mutation carries the lease token in the owner's scope; a refused
one (the lease is gone) is logged and dropped: the Operations service already
decided what happens to the operation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from durable_ops import telemetry
from durable_ops.ai_worker import failures
from durable_ops.ai_worker.claims import ClaimedOperation
from durable_ops.ai_worker.clients import OperationsClient, WorkspaceCalls
from durable_ops.ai_worker.failures import Action, Outcome
from durable_ops.ai_worker.handlers import HANDLERS, TaskHandler
from durable_ops.ai_worker.inference.errors import InferenceError
from durable_ops.ai_worker.inference.result import Provenance
from durable_ops.ai_worker.inference.router import Router
from durable_ops.ai_worker.journal import AttemptJournal, JournalEntry, JournalError
from durable_ops.model.admission import effective_privacy, require_entitled
from durable_ops.model.errors import CANCEL_REQUESTED, DomainError, LeaseLost
from durable_ops.model.routing import Route
from durable_ops.worker.lease import Lease

# The model call is bounded by the client's own timeout (the task timeout); this
# margin lets that classified timeout win, leaving the attempt-wide one as a backstop.
ATTEMPT_TIMEOUT_MARGIN_SECONDS = 2.0

_log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Produced:
    body_json: str
    provenance: Provenance


class Executor:
    def __init__(
        self,
        operations: OperationsClient,
        workspace: WorkspaceCalls,
        router: Router,
        journal: AttemptJournal,
        *,
        lease_seconds: int,
        task_timeout_seconds: float,
        handlers: Mapping[str, TaskHandler] = HANDLERS,
    ) -> None:
        self._operations = operations
        self._workspace = workspace
        self._router = router
        self._journal = journal
        self._lease_seconds = lease_seconds
        self._attempt_timeout = task_timeout_seconds + ATTEMPT_TIMEOUT_MARGIN_SECONDS
        self._handlers = handlers

    async def execute(self, op: ClaimedOperation, release: asyncio.Event) -> None:
        """Run ``op`` to a terminal call; ``release`` set means give it back (shutdown).

        Raises ``JournalError`` when the host journal cannot record the attempt:
        the claim is given back first, and the worker must stop.
        """
        log = _log.bind(**op.log_fields())
        entry = JournalEntry(op.operation_id, op.attempt, op.owner_id, op.route)
        try:
            await asyncio.to_thread(self._journal.start, entry)
        except JournalError:
            await self._settle_without_lease(
                op, Outcome(Action.RETRY, "host_store_error", "the host journal failed"), log
            )
            raise
        succeeded = False
        try:
            # The attempt is a trace of its own, linked to the request that created the work.
            with telemetry.span(
                "ai_worker.execute", root=True, link=op.trace_parent, operation_id=op.operation_id
            ):
                succeeded = await self._run(op, release, log)
        finally:
            await asyncio.to_thread(self._journal.finish, entry, succeeded)

    async def _run(self, op: ClaimedOperation, release: asyncio.Event, log: Any) -> bool:
        try:
            lease = await Lease.open(self._operations, op, self._lease_seconds)
        except DomainError as error:
            log.warning("lease_lost", phase="first_heartbeat", code=error.code)
            return False
        try:
            if lease.cancel_requested:
                await self._acknowledge(op, lease, log)
                return False
            return await self._attempt(op, lease, release, log)
        finally:
            await lease.close()

    async def _attempt(
        self, op: ClaimedOperation, lease: Lease, release: asyncio.Event, log: Any
    ) -> bool:
        work = asyncio.create_task(self._produce(op, lease))
        stops = {asyncio.create_task(lease.ended.wait()), asyncio.create_task(release.wait())}
        try:
            await asyncio.wait({work, *stops}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for stop in stops:
                stop.cancel()
            interrupted = not work.done()
            if interrupted:
                work.cancel()
                await asyncio.wait({work})  # its end only; whatever it raised is moot now
        if lease.lost:
            log.warning("attempt_abandoned", reason="lease_lost")
            return False
        if lease.cancel_requested:
            await self._acknowledge(op, lease, log)
            return False
        if interrupted or work.cancelled():
            await self._report(op, lease, failures.shutdown(), log)
            return False
        error = work.exception()
        if error is not None:
            await self._report(op, lease, failures.classify(error), log)
            return False
        return await self._publish(op, lease, work.result(), log)

    async def _produce(self, op: ClaimedOperation, lease: Lease) -> Produced:
        handler = self._handlers[op.task_type]
        external_allowed = handler.task.external_allowed
        async with asyncio.timeout(self._attempt_timeout):
            settings = await self._workspace.ai_settings(op.owner_id)
            # The global switch is admission's concern; admitted work runs while the worker does.
            require_entitled(
                global_enabled=True, plan=settings.plan, ai_enabled=settings.ai_enabled
            )
            privacy = effective_privacy(op.privacy, settings.privacy)
            refs = handler.refs_for(op.subject_type, op.subject_id, op.context_ref)
            inputs = await handler.inputs(self._workspace.reader(op.owner_id), refs)
            request = handler.request(inputs)
            progress = lease.report_progress
            with telemetry.span(
                "ai_worker.inference", link=op.trace_parent, operation_id=op.operation_id
            ):
                if op.route is Route.EXTERNAL:
                    result = await self._router.infer_external(
                        request, privacy, external_allowed, on_progress=progress
                    )
                else:
                    result = await self._router.infer(
                        request, privacy, external_allowed, on_progress=progress
                    )
        try:
            body = handler.note_body(result.answer)
        except InferenceError as error:
            error.provenance = error.provenance or result.provenance
            raise
        return Produced(body_json=body, provenance=result.provenance)

    async def _publish(
        self, op: ClaimedOperation, lease: Lease, produced: Produced, log: Any
    ) -> bool:
        try:
            await lease.confirm()
        except DomainError as error:
            log.warning("attempt_abandoned", reason="lease_lost", code=error.code)
            return False
        try:
            note_id, new = await self._workspace.publish_note(op, produced.body_json)
        except LeaseLost as error:
            if error.code == CANCEL_REQUESTED:
                await self._acknowledge(op, lease, log)
            else:
                log.warning("attempt_abandoned", reason="lease_lost", code=error.code)
            return False
        except DomainError as error:
            outcome = failures.classify(error)
            await self._report(op, lease, outcome.with_provenance(produced.provenance), log)
            return False
        await lease.close()
        try:
            with telemetry.span(
                "ai_worker.complete", link=op.trace_parent, operation_id=op.operation_id
            ):
                await self._operations.complete(op, produced.provenance, note_id)
        except DomainError as error:
            # The note is published; the operation's next attempt finds it and completes.
            log.warning("complete_refused", code=error.code, note_id=note_id)
            return False
        log.info(
            "operation_succeeded",
            note_id=note_id,
            new_note=new,
            provider=produced.provenance.provider,
            model=produced.provenance.model,
            provenance_route=produced.provenance.route,
        )
        return True

    async def _report(self, op: ClaimedOperation, lease: Lease, outcome: Outcome, log: Any) -> None:
        await lease.close()
        await self._settle_without_lease(op, outcome, log)

    async def _settle_without_lease(self, op: ClaimedOperation, outcome: Outcome, log: Any) -> None:
        try:
            if outcome.action is Action.FALLBACK:
                state = await self._operations.request_external_fallback(op, outcome.provenance)
            else:
                state = await self._operations.fail(
                    op,
                    retryable=outcome.retryable,
                    code=outcome.code,
                    message=outcome.message,
                    provenance=outcome.provenance,
                )
        except DomainError as error:
            log.warning("lease_mutation_refused", action=outcome.action.value, code=error.code)
            return
        log.info(
            "attempt_failed",
            action=outcome.action.value,
            failure_code=outcome.code,
            state=state,
            provenance_route=outcome.provenance.route if outcome.provenance else None,
        )

    async def _acknowledge(self, op: ClaimedOperation, lease: Lease, log: Any) -> None:
        await lease.close()
        try:
            await self._operations.acknowledge_cancellation(op)
        except DomainError as error:
            log.warning(
                "lease_mutation_refused", action="acknowledge_cancellation", code=error.code
            )
            return
        log.info("operation_cancelled")
