"""An SDK worker whose attempts enter the history: ``python -m tests.partition.sdk_worker TARGET``.

With ``OPS_SERVICE_KEY`` (a worker key) set it runs ``jepsen.sdk`` operations
and prints one history line per event (``call {json}``): the claim, as the
handler starts with the lease in hand, and the completion once the service
accepted it (``attempt.ending``; the SDK settles after the handler returns).
A completion never accepted is left out: to the checker it did not happen,
which is what the service answered. The run SIGSTOPs this process past its
lease (the classic double-execution case) and SIGCONTs it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time

from durable_ops.worker import Attempt, Ending, Worker, WorkerOptions
from tests.partition.history import Call, Kind, Outcome

TASK_TYPE = "jepsen.sdk"
LEASE_SECONDS = 5  # short: a pause of the process outlives it
WORK_SECONDS = 0.3
WATCH_SECONDS = 60.0  # how long a settlement is waited for before it counts as not accepted


def emit(call: Call) -> None:
    print("call", json.dumps(call.to_json()), flush=True)


async def watch(attempt: Attempt, returned: float) -> None:
    deadline = time.monotonic() + WATCH_SECONDS
    while attempt.ending is None and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    if attempt.ending is Ending.COMPLETED:
        emit(
            Call("sdk-worker", Kind.COMPLETE, returned, time.monotonic(), Outcome.OK,
                 {"operation_id": attempt.operation_id, "lease_token": attempt.lease_token})
        )  # fmt: skip


async def main(target: str) -> None:
    options = WorkerOptions(concurrency=4, batch_size=4, lease_seconds=LEASE_SECONDS)
    worker = Worker(target, os.environ["OPS_SERVICE_KEY"], options)
    watchers: set[asyncio.Task[None]] = set()

    @worker.handler(TASK_TYPE)
    async def work(attempt: Attempt) -> None:
        now = time.monotonic()
        emit(
            Call("sdk-worker", Kind.CLAIM, now, now, Outcome.OK, {},
                 {"operation_id": attempt.operation_id, "owner": attempt.owner_id,
                  "lease_token": attempt.lease_token})
        )  # fmt: skip
        await asyncio.sleep(WORK_SECONDS)
        task = asyncio.get_running_loop().create_task(watch(attempt, time.monotonic()))
        watchers.add(task)
        task.add_done_callback(watchers.discard)

    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, worker.stop)
    print("worker_ready", flush=True)
    await worker.run()
    await asyncio.gather(*watchers, return_exceptions=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
