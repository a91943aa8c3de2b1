"""A worker process on the SDK, for the batched-lease drill: no-op attempts that take a moment.

``python -m tests.support.sdk_worker TARGET TASK_TYPE [JOB_SECONDS]`` with
``OPS_SERVICE_KEY`` (a worker key) set; SIGTERM or SIGINT stops it gracefully (the SDK's
own handling: nothing here installs a handler), SIGKILL is the drill. It prints ``worker_ready``,
then ``job_started T`` as each attempt starts (``T`` on ``time.monotonic()``, one
clock for every process of the host), so the drill can kill it while it holds
the lease of a attempt that has not ended.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

from durable_ops.worker import Attempt, Worker, WorkerOptions

JOB_SECONDS = 0.5  # long enough that a attempt seen starting is still running at the kill
LEASE_SECONDS = 5  # the shortest lease: a killed worker's attempts come back soon


async def main(target: str, task_type: str, job_seconds: float = JOB_SECONDS) -> None:
    options = WorkerOptions(concurrency=10, batch_size=10, lease_seconds=LEASE_SECONDS)
    worker = Worker(target, os.environ["OPS_SERVICE_KEY"], options)

    @worker.handler(task_type)
    async def noop(attempt: Attempt) -> None:
        print("job_started", time.monotonic(), flush=True)
        await asyncio.sleep(job_seconds)

    print("worker_ready", flush=True)
    await worker.run()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], *map(float, sys.argv[3:4])))
