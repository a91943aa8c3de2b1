"""After a stop hands an attempt back, the operation shows that attempt's progress while it
waits ("Interrupted, will resume"); the next run starts from nothing, so the page never
shows the old percentage as the new run's, and the new run's first report stands even
when it is lower than the old one (no guard keeps progress from going down). Both
engines, through the services and the worker SDK."""

from __future__ import annotations

import asyncio

from durable_ops.worker import Attempt, Worker, WorkerOptions
from tests.support.grpc_services import SECRET, Services
from tests.support.operations_client import ALICE, QUEUED, RUNNING, SUCCEEDED, TASK, OpsClient
from tests.support.running_worker import run_until

HANG_GUARD = 30.0


def _worker(services: Services, **options: float) -> Worker:
    return Worker(services.target, SECRET, WorkerOptions(**options))  # type: ignore[arg-type]


def test_the_next_run_starts_from_nothing_and_its_lower_report_stands(
    services: Services, ops: OpsClient
) -> None:
    created = ops.create(ALICE, "k-resumed").id
    first = _worker(services, shutdown_seconds=0.1)

    @first.handler(TASK)
    async def interrupted(attempt: Attempt) -> None:
        await attempt.progress(51)
        await asyncio.sleep(HANG_GUARD)  # until the stop cancels it as a shutdown

    async def reported() -> None:
        while ops.row(created).progress_percent != 51:
            await asyncio.sleep(0.01)

    run_until(first, reported)
    waiting = ops.get(ALICE, created)
    assert (waiting.state, waiting.progress_percent) == (QUEUED, 51)  # "will resume"

    seen: list[tuple[int, int]] = []  # (state, progress) as the owner's page reads them
    second = _worker(services)

    @second.handler(TASK)
    async def resumed(attempt: Attempt) -> None:
        claimed = await asyncio.to_thread(ops.get, ALICE, created)
        seen.append((claimed.state, claimed.progress_percent))
        await attempt.progress(16)
        while (await asyncio.to_thread(ops.get, ALICE, created)).progress_percent != 16:
            await asyncio.sleep(0.01)
        seen.append((RUNNING, 16))

    async def succeeded() -> None:
        while ops.get(ALICE, created).state != SUCCEEDED:
            await asyncio.sleep(0.02)

    run_until(second, succeeded)
    assert seen == [(RUNNING, 0), (RUNNING, 16)]
    assert ops.get(ALICE, created).progress_percent == 100
