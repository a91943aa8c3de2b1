"""The real AI worker (``durable_ops.ai_worker.main.build_worker``) drained in-process.

Integration tests run it against the in-process services with stand-ins where
a test needs one (Workspace, the journal): ``drain`` claims and runs until a
claim finds nothing, exactly as the process would between its waiting claims.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from durable_ops.ai_worker.execution import Executor
from durable_ops.ai_worker.journal import JournalEntry
from durable_ops.ai_worker.main import build_worker
from durable_ops.model.routing import Route
from durable_ops.settings import Settings
from tests.support.grpc_services import Services
from tests.support.keys import keys_dir


class Journal:
    """The host journal as a record of what was started and finished."""

    def __init__(self) -> None:
        self.started: list[JournalEntry] = []
        self.finished: list[tuple[str, bool]] = []

    def start(self, entry: JournalEntry) -> None:
        self.started.append(entry)

    def finish(self, entry: JournalEntry, succeeded: bool) -> None:
        self.finished.append((entry.operation_id, succeeded))

    def unresolved(self) -> list[JournalEntry]:
        return []

    def close(self) -> None:
        return None


def worker_settings(services: Services, lease_seconds: int) -> Settings:
    return replace(
        Settings(),
        operations_target=services.target,
        service_keys_dir=str(keys_dir()),
        worker_lease_seconds=lease_seconds,
        worker_concurrency=1,
    )


async def drain(
    services: Services,
    executor: Executor,
    lease_seconds: int,
    routes: Sequence[Route] = (Route.LOCAL,),
) -> None:
    """Claim (for ``routes``) and run AI work until a claim finds nothing."""
    settings = worker_settings(services, lease_seconds)
    worker = build_worker(settings, executor, list(routes), until_empty=True)
    await worker.run()
