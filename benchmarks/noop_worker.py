"""A no-op worker: claims ``bench.noop`` in the neutral scope, completes in the owner scope.

The AI worker is for AI tasks; this is the smallest honest worker loop over the
real gRPC API, used to drain operations for the peer comparison. It stops
when the queue is empty (as procrastinate's ``wait=False`` worker does).
"""

from __future__ import annotations

import asyncio

from benchmarks.client import TASK_TYPE, OpsClient

CHANNELS = 2


async def drain(target: str, workers: int, task_type: str = TASK_TYPE) -> int:
    """Run ``workers`` concurrent claim→complete loops until nothing is left; how many ran."""
    clients = [OpsClient(target) for _ in range(CHANNELS)]
    completed = 0

    async def work(client: OpsClient) -> None:
        nonlocal completed
        while True:
            claimed = await client.claim(task_type)
            if claimed is None:
                return
            await client.complete(claimed)
            completed += 1

    try:
        await asyncio.gather(*(work(clients[i % CHANNELS]) for i in range(workers)))
    finally:
        for each in clients:
            await each.close()
    return completed


async def fill(target: str, count: int, run_id: str, concurrency: int = 16) -> None:
    """Create ``count`` ``bench.noop`` operations through the API (not timed by callers)."""
    clients = [OpsClient(target) for _ in range(CHANNELS)]
    next_index = 0

    async def produce(client: OpsClient) -> None:
        nonlocal next_index
        while next_index < count:
            index = next_index
            next_index += 1
            await client.create(f"bench-owner-{index % 50}", f"{run_id}-{index}")

    try:
        await asyncio.gather(*(produce(clients[i % CHANNELS]) for i in range(concurrency)))
    finally:
        for each in clients:
            await each.close()
