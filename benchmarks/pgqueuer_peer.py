"""Figure 5's second peer: pgqueuer draining the same no-op jobs on the same PostgreSQL server.

pgqueuer is a batched queue: one ``QueueManager`` on one connection dequeues
``batch_size`` jobs per statement and logs their outcomes in buffered batches.
Each round gets a fresh database with pgqueuer's schema installed and the N jobs
queued in one ``enqueue`` call, untimed; the timed part is ``run`` in
``QueueExecutionMode.drain``, which returns once no job is queued and the ones in
flight are done (procrastinate's ``wait=False``). ``max_concurrent_tasks`` holds
the jobs in flight to the other sides' worker count; pgqueuer wants room for two
batches, so a batch is half of it.
"""

from __future__ import annotations

import importlib.util
import logging
import time

from benchmarks.databases import postgres_database

ENTRYPOINT = "bench.noop"


def available() -> bool:
    """pgqueuer comes with the ``bench`` extra (``scripts/bootstrap.sh``)."""
    return importlib.util.find_spec("pgqueuer") is not None


async def drain_round(count: int, workers: int) -> float:
    """One round on its own database: jobs/s from the first dequeue to the drained queue."""
    import psycopg  # type: ignore[import-not-found,unused-ignore]
    from pgqueuer import PsycopgDriver, Queries, QueueManager
    from pgqueuer.models import Job
    from pgqueuer.types import QueueExecutionMode

    logging.getLogger("pgqueuer").setLevel(logging.WARNING)
    with postgres_database() as conninfo:
        async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as connection:
            queries = Queries(PsycopgDriver(connection))
            await queries.install()
            await queries.enqueue([ENTRYPOINT] * count, [None] * count, [0] * count)
            manager = QueueManager(queries)
            done = 0

            @manager.entrypoint(ENTRYPOINT)
            async def noop(job: Job) -> None:
                nonlocal done
                done += 1

            started = time.perf_counter()
            await manager.run(
                batch_size=workers // 2,
                mode=QueueExecutionMode.drain,
                max_concurrent_tasks=workers,
            )
            elapsed = time.perf_counter() - started
    if done < count:
        raise RuntimeError(f"pgqueuer drained {done} of {count} jobs")
    return done / elapsed
