"""Settle the journal's unfinished attempts from the operations' real state.

A record still ``running`` on start means a worker on this host died during
that attempt. Its lease token died with it, so nothing can be released: the
Operations service is asked what became of the operation, and the record is
closed only once the attempt is over there (the lease expired and the
sweeper moved it on, or it finished). Nothing is replayed (seed 002).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Protocol

import structlog

from durable_ops.ai_worker.journal import AttemptJournal, JournalEntry
from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.model.errors import DomainError, NotFound

_log = structlog.get_logger(__name__)


class OperationReader(Protocol):
    async def get(self, owner_id: str, operation_id: str) -> pb.Operation: ...


def attempt_over(operation: pb.Operation, entry: JournalEntry) -> bool | None:
    """None while ``entry``'s attempt may still run; else whether it succeeded."""
    if operation.state == pb.OPERATION_STATE_RUNNING and operation.attempt == entry.attempt:
        return None
    return operation.state == pb.OPERATION_STATE_SUCCEEDED and operation.attempt == entry.attempt


async def reconcile(
    journal: AttemptJournal,
    operations: OperationReader,
    stopping: asyncio.Event,
    poll_seconds: float,
) -> None:
    """Close every unresolved record; returns early when ``stopping`` is set."""
    for entry in await asyncio.to_thread(journal.unresolved):
        fields = {"operation_id": entry.operation_id, "owner": entry.owner_id}
        _log.info("journal_reconciling", **fields, attempt=entry.attempt)
        while not stopping.is_set():
            try:
                outcome = attempt_over(
                    await operations.get(entry.owner_id, entry.operation_id), entry
                )
            except NotFound:
                outcome = False  # the owner deleted it: the attempt is certainly over
            except DomainError as error:
                _log.warning("journal_reconcile_retry", **fields, code=error.code)
                outcome = None
            if outcome is not None:
                await asyncio.to_thread(journal.finish, entry, outcome)
                _log.info("journal_reconciled", **fields, succeeded=outcome)
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), poll_seconds)
