"""A no-op worker on the worker SDK: drains ``bench.noop`` operations for the peer figure.

The smallest honest worker over the real gRPC API: the SDK claims in batches
in the neutral scope and completes in batches, each item in its owner's scope.
It stops when the queue is empty (as procrastinate's ``wait=False`` worker does).
"""

from __future__ import annotations

import asyncio

from benchmarks.client import TASK_TYPE, OpsClient, Producer
from benchmarks.processes import signing_key
from durable_ops.model.scope import Role
from durable_ops.worker import Attempt, Worker, WorkerOptions

OWNERS = 50


async def drain(target: str, workers: int, task_type: str = TASK_TYPE, batch: int = 10) -> int:
    """Run ``workers`` SDK workers (``durable_ops.worker``) until nothing is left; how many ran.

    Each runs ``batch`` no-op attempts at once, claimed ``batch`` per call and
    completed in batches of up to ``batch``.
    """
    options = WorkerOptions(concurrency=batch, batch_size=batch)
    key = signing_key(Role.WORKER)
    pool = [Worker(target, key, options, until_empty=True) for _ in range(workers)]
    for worker in pool:
        worker.handler(task_type)(_noop)
    await asyncio.gather(*(worker.run() for worker in pool))
    failed = sum(worker.failed for worker in pool)
    if failed:
        raise RuntimeError(f"{failed} no-op attempts failed")
    return sum(worker.completed for worker in pool)


async def lifecycles(
    client: OpsClient,
    target: str,
    *,
    total: int,
    producers: int,
    workers: int,
    owners: int,
    run_id: str,
) -> float:
    """Figure 1's subject with the SDK: ``producers`` create ``total`` operations while
    ``workers`` SDK workers (default options: batches of 10) drain them; lifecycles/s."""
    pool = [Worker(target, signing_key(Role.WORKER), WorkerOptions()) for _ in range(workers)]
    for worker in pool:
        worker.handler(TASK_TYPE)(_noop)
    producer = Producer(client, total=total, owners=owners, run_id=run_id)

    async def until_done() -> None:
        await asyncio.gather(*(producer.run() for _ in range(producers)))
        while sum(worker.completed for worker in pool) < total:
            await asyncio.sleep(0.001)
        for worker in pool:
            worker.stop()

    loop = asyncio.get_running_loop()
    started = loop.time()
    running = [asyncio.create_task(worker.run()) for worker in pool]
    await until_done()
    elapsed = loop.time() - started
    await asyncio.gather(*running)
    return total / elapsed


async def _noop(attempt: Attempt) -> None:
    return None


async def fill(target: str, count: int, run_id: str, concurrency: int = 16) -> None:
    """Create ``count`` ``bench.noop`` operations through the API (not timed by callers)."""
    client = OpsClient(target)
    producer = Producer(client, total=count, owners=OWNERS, run_id=run_id)
    try:
        await asyncio.gather(*(producer.run() for _ in range(concurrency)))
    finally:
        await client.close()
