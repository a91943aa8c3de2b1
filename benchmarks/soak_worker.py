"""``python -m benchmarks.soak_worker TARGET KEY TASK_TYPE``: the soak's SDK worker process.

A worker on the public SDK (``durable_ops.worker``) running ``TASK_TYPE``
attempts, each as its subject id says (``benchmarks.soak.plan_subject`` writes
it): hold the lease for so many milliseconds (joining the worker's lease
stream, so leases held past a third of their length are beaten), report
progress halfway, then complete, fail for good or fail retryably. For every
attempt it starts it prints ``start OPERATION_ID ATTEMPT UNIX_TIME`` (one line,
flushed), which the soak reads as the operation's pickup. It runs until
SIGTERM, then stops as the SDK stops (running attempts are released).

A process of its own, so its RSS and open files are measured like the
services' and the load generator's CPU is not its own.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time

from durable_ops.worker import (
    Attempt,
    PermanentFailure,
    RetryableFailure,
    Worker,
    WorkerOptions,
)

LEASE_SECONDS = 10  # a held lease is beaten every ~3 s: long holds cross several beats
CONCURRENCY = 20
HELD_MS = 1000  # an attempt held at least this long holds its lease on the stream at once


def parse_subject(subject_id: str) -> tuple[int, str]:
    """``hold-<ms>-<ending>`` → (milliseconds, ending); ending is ``ok``, ``fail`` or
    ``retry`` (see ``benchmarks.soak.plan_subject``)."""
    kind, milliseconds, ending = subject_id.split("-", 2)
    if kind != "hold" or ending not in {"ok", "fail", "retry"}:
        raise ValueError(f"not a soak subject: {subject_id!r}")
    return int(milliseconds), ending


async def run_attempt(attempt: Attempt) -> str | None:
    print(f"start {attempt.operation_id} {attempt.number} {time.time():.6f}", flush=True)
    milliseconds, ending = parse_subject(attempt.subject.id)
    if milliseconds >= HELD_MS:  # long enough to be beaten: hold the lease on the stream now
        await attempt.hold()
        await asyncio.sleep(milliseconds / 2000)
        await attempt.progress(50)
        await asyncio.sleep(milliseconds / 2000)
    else:
        await asyncio.sleep(milliseconds / 1000)
    if ending == "fail":
        raise PermanentFailure("soak_planned", "a planned permanent failure")
    if ending == "retry" and attempt.number == 1:
        raise RetryableFailure("soak_planned_retry", "a planned retryable failure")
    return f"soak-result-{attempt.operation_id}"


async def serve(target: str, key: str, task_type: str) -> None:
    options = WorkerOptions(concurrency=CONCURRENCY, batch_size=10, lease_seconds=LEASE_SECONDS)
    worker = Worker(target, key, options)
    worker.handler(task_type)(run_attempt)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, worker.stop)
    loop.add_signal_handler(signal.SIGINT, worker.stop)
    await worker.run()


def main() -> None:
    target, key, task_type = sys.argv[1:4]
    asyncio.run(serve(target, key, task_type))


if __name__ == "__main__":
    main()
