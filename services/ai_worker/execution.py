"""One AI attempt on the worker SDK: the handler of every AI task type, and what wraps it.

    attempt (an interceptor):  journal it on the host ─ one trace linked to the
        │                      creating request ─ ... ─ journal its end
    first beat (``attempt.hold``) ─ cancel requested? ── the SDK acknowledges
        │
    produce:  entitlement and privacy re-checked from live settings
        │     → the handler reads the owner's texts → one structured
        │     request (local, or external for a fallback claim; what it
        │     used is recorded on the attempt and settled with it)
        │     → the answer validated and turned into the note body
        │     (the streamed answer's progress goes out on the heartbeat)
        ├─ the stream says cancel ──── the SDK cancels the work, acknowledges
        ├─ the stream lost the lease ─ the SDK stops the work, settles nothing
        ├─ the worker is shutting down ─ the SDK stops the work, fails it retryable
        ├─ it raised ────────────────── fallback / fail (``failures.settlement``)
        │
    confirm the lease → publish the note under the lease → the SDK completes
                           ├─ refused, cancel requested ── the SDK acknowledges
                           └─ refused, lease lost ──────── publish nothing

Cancel wins until the note is published: Workspace checks the lease and the
cancel flag in the transaction that writes the note, and the publish runs to
its answer even if the cancel arrives meanwhile (``attempt.fenced``). After that,
completion goes ahead and the operation succeeds although the owner asked to
cancel. A host journal that fails gives the claim back and stops the worker
(the SDK's interceptor contract): it must not run attempts it cannot record.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

import structlog

from durable_ops import telemetry
from durable_ops.ai_worker import failures
from durable_ops.ai_worker.clients import WorkspaceCalls
from durable_ops.ai_worker.handlers import HANDLERS, TaskHandler
from durable_ops.ai_worker.inference.errors import InferenceError
from durable_ops.ai_worker.inference.router import Router
from durable_ops.ai_worker.journal import AttemptJournal, JournalEntry, JournalError, claim_of
from durable_ops.model.admission import effective_privacy, require_entitled
from durable_ops.model.errors import CANCEL_REQUESTED, DomainError, LeaseLost
from durable_ops.model.provenance import Provenance
from durable_ops.model.routing import Route
from durable_ops.model.states import Privacy
from durable_ops.worker import Attempt, Completed, Ending, Worker
from durable_ops.worker.lease import Lease

# The attempt as a whole is bounded by the task timeout, the router's circuit wait and this
# margin (275 s with the defaults): a model call ends only when the model is silent for the
# task timeout (ADR 64), so this is what bounds one that keeps trickling progress; it holds
# the largest admitted prompt on the real model (~160 s). The margin lets a classified
# model timeout win when the model falls silent near the end.
ATTEMPT_TIMEOUT_MARGIN_SECONDS = 2.0

_log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Produced:
    body_json: str
    provenance: Provenance


@dataclass(frozen=True)
class PublishedNote(Completed):
    """A published note (``result_ref``), and whether this attempt wrote it first."""

    new_note: bool = False


class Executor:
    def __init__(
        self,
        workspace: WorkspaceCalls,
        router: Router,
        journal: AttemptJournal,
        *,
        task_timeout_seconds: float,
        handlers: Mapping[str, TaskHandler] = HANDLERS,
    ) -> None:
        self._workspace = workspace
        self._router = router
        self._journal = journal
        self._attempt_timeout = (
            task_timeout_seconds + router.circuit_wait_seconds + ATTEMPT_TIMEOUT_MARGIN_SECONDS
        )
        self._handlers = handlers

    def register(self, worker: Worker) -> None:
        """Handle every AI task type on ``worker``."""
        for task_type in self._handlers:
            worker.handler(task_type)(self.run)

    @asynccontextmanager
    async def journaled(self, attempt: Attempt) -> AsyncIterator[None]:
        """The SDK interceptor: the host journal before and after, one trace around it.

        ``JournalError`` either side stops the worker (the SDK gives the claim
        back first when the journal cannot record its start).
        """
        log = _log.bind(**attempt.log_fields())
        log.info("operation_taken")
        entry = JournalEntry(
            attempt.operation_id,
            attempt.number,
            attempt.owner_id,
            attempt.route,
            claim_of(attempt.lease_token),
        )
        with self._journal_failure(log):
            await asyncio.to_thread(self._journal.start, entry)
        try:
            # The attempt is a trace of its own, linked to the request that created the work.
            with telemetry.span(
                "ai_worker.execute",
                root=True,
                link=attempt.trace_parent,
                operation_id=attempt.operation_id,
            ):
                yield
        finally:
            with self._journal_failure(log):
                await asyncio.to_thread(self._journal.finish, entry, attempt.completed)
        self._log_ending(attempt, log)

    async def run(self, attempt: Attempt) -> PublishedNote:
        """The handler of every AI task type: produce the note, publish it under the lease."""
        lease = await attempt.hold()  # the first beat: a cancelled operation starts no inference
        try:
            produced = await self._produce(attempt, lease)
        except InferenceError as error:
            # The model's failures are understood, settled by their code (the SDK logs it in
            # ``worker_attempt_failed``): no stack trace for every attempt while it is down.
            # A rate limit's Retry-After is measured on the router's clock, as its waits were.
            raise failures.settlement(error, self._router.wall_clock()) from error
        log = _log.bind(**attempt.log_fields())
        try:
            await lease.confirm()
            note_id, new = await attempt.fenced(
                self._workspace.publish_note(attempt, produced.body_json, produced.provenance)
            )
        except LeaseLost as error:
            if error.code != CANCEL_REQUESTED:
                log.warning("attempt_abandoned", reason="lease_lost", code=error.code)
            raise
        except DomainError as error:
            outcome = failures.classify(error).with_provenance(produced.provenance)
            raise outcome.as_settlement() from error
        return PublishedNote(result_ref=note_id, provenance=produced.provenance, new_note=new)

    async def _produce(self, attempt: Attempt, lease: Lease) -> Produced:
        handler = self._handlers[attempt.task_type]
        external_allowed = handler.task.external_allowed
        async with asyncio.timeout(self._attempt_timeout):
            settings = await self._workspace.ai_settings(attempt)
            # The global switch is admission's concern; admitted work runs while the worker does.
            require_entitled(
                global_enabled=True, plan=settings.plan, ai_enabled=settings.ai_enabled
            )
            privacy = effective_privacy(attempt.privacy, settings.privacy)

            async def privacy_now() -> Privacy:
                again = await self._workspace.ai_settings(attempt)
                return effective_privacy(attempt.privacy, again.privacy)

            refs = handler.refs_for(attempt.subject.type, attempt.subject.id, attempt.context_ref)
            inputs = await handler.inputs(self._workspace.reader(attempt), refs)
            request = handler.request(inputs)
            progress, text = lease.report_progress, lease.report_text
            with telemetry.span(
                "ai_worker.inference", link=attempt.trace_parent, operation_id=attempt.operation_id
            ):
                infer = (
                    partial(self._router.infer_external, privacy_now=privacy_now)
                    if attempt.route is Route.EXTERNAL
                    else self._router.infer
                )
                # What the model used goes with the settlement, whatever the attempt's end.
                result = await infer(
                    request,
                    privacy,
                    external_allowed,
                    on_progress=progress,
                    on_text=text,
                    on_usage=attempt.used,
                )
        try:
            body = handler.note_body(result.answer)
        except InferenceError as error:
            error.provenance = error.provenance or result.provenance
            raise
        return Produced(body_json=body, provenance=result.provenance)

    @staticmethod
    @contextmanager
    def _journal_failure(log: Any) -> Iterator[None]:
        try:
            yield
        except JournalError as error:
            log.error("journal_failed", reason=error.message)
            raise

    @staticmethod
    def _log_ending(attempt: Attempt, log: Any) -> None:
        note = attempt.result if isinstance(attempt.result, PublishedNote) else None
        if attempt.ending is Ending.CANCELLED:
            log.info("operation_cancelled")
        elif attempt.ending is Ending.RELEASED:
            log.info(
                "attempt_released",
                reason="worker_stopping",
                say=f"handed {attempt.operation_id} back: queued, it resumes on the next start",
            )
        elif attempt.ending in (Ending.FAILED, Ending.FELL_BACK):
            log.info("attempt_failed", ending=attempt.ending.value)
        elif note is not None and not attempt.completed:
            # The note is published; the operation's next attempt finds it and completes.
            log.warning("complete_refused", note_id=note.result_ref)
        elif note is not None:
            provenance = note.provenance
            log.info(
                "operation_succeeded",
                note_id=note.result_ref,
                new_note=note.new_note,
                provider=provenance.provider if provenance else None,
                model=provenance.model if provenance else None,
                provenance_route=provenance.route if provenance else None,
            )
