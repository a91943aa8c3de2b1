"""A no-op worker: claims ``bench.noop`` in the neutral scope, completes in the owner scope.

The AI worker is for AI tasks; this is the smallest honest worker loop over the
real gRPC API, used to drain operations for the peer comparison. It stops
when the queue is empty (as procrastinate's ``wait=False`` worker does).
"""

from __future__ import annotations

import asyncio

from benchmarks.client import TASK_TYPE, OpsClient, Producer

OWNERS = 50


async def drain(target: str, workers: int, task_type: str = TASK_TYPE, batch: int = 1) -> int:
    """Run ``workers`` concurrent claim→complete loops until nothing is left; how many ran.

    ``batch`` 1 uses the single-operation calls; more claims and completes up to
    ``batch`` operations per call (``ClaimOperations``, ``CompleteOperations``).
    """
    client = OpsClient(target)
    completed = 0

    async def work() -> None:
        nonlocal completed
        while True:
            if batch == 1:
                claimed = await client.claim(task_type)
                if claimed is None:
                    return
                await client.complete(claimed)
                completed += 1
                continue
            claims = await client.claim_many(batch, task_type)
            if not claims:
                return
            refused = await client.complete_many(claims)
            if refused:
                raise RuntimeError(f"{refused} of {len(claims)} completions were refused")
            completed += len(claims)

    try:
        await asyncio.gather(*(work() for _ in range(workers)))
    finally:
        await client.close()
    return completed


async def fill(target: str, count: int, run_id: str, concurrency: int = 16) -> None:
    """Create ``count`` ``bench.noop`` operations through the API (not timed by callers)."""
    client = OpsClient(target)
    producer = Producer(client, total=count, owners=OWNERS, run_id=run_id)
    try:
        await asyncio.gather(*(producer.run() for _ in range(concurrency)))
    finally:
        await client.close()
