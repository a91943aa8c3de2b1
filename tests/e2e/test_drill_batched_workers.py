"""Batched leases under load and a crash: 8 SDK worker processes drain 1,000 operations
on MariaDB, and one of them is SIGKILLed in the middle (issue 17).

Every operation ends succeeded, with one successful attempt and one
notification. Only the operations the killed worker held run again: their
first attempt ends ``expired`` once its 5 s lease runs out, and the sweeper
requeues it after its 1 s retry delay. Timeouts only keep a broken build from
hanging; nothing is timed.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import select

from durable_ops.clock import utc_now
from durable_ops.model.scope import Role
from durable_ops.storage.schema import OperationAttempt
from tests.conftest import EmptyDatabase
from tests.support import stored
from tests.support.figures import report
from tests.support.grpc_services import Services, running_services
from tests.support.keys import key_env
from tests.support.operations_client import OWNER_IDS, TASK, OpsClient
from tests.support.sdk_worker import JOB_SECONDS

OPERATIONS = 1000
WORKERS = 8
HANG_GUARD = 120.0
pytestmark = [pytest.mark.mariadb, pytest.mark.slow]


@pytest.fixture
def services(empty_mariadb: EmptyDatabase) -> Iterator[Services]:
    with running_services(empty_mariadb(), utc_now) as running:
        yield running


def _sweeping(services: Services, stop: threading.Event) -> None:
    """The Operations process's sweeper, here: expired leases go back to the queue."""
    while not stop.wait(0.25):
        services.sweep()


def _start_worker(services: Services) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.sdk_worker", services.target, TASK],
        env={**os.environ, **key_env(Role.WORKER)},
        stdout=subprocess.PIPE,
        text=True,
    )


def _wait_for(condition: object, what: str) -> None:
    give_up_at = time.monotonic() + HANG_GUARD
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < give_up_at, f"timed out waiting for {what}"
        time.sleep(0.05)


def _until_a_job_starts(worker: subprocess.Popen[str]) -> None:
    """Read the worker's ``job_started`` lines until one is fresh: a job that started
    less than a tenth of its length ago (the lines before are of jobs that may be done)."""
    assert worker.stdout is not None
    while True:
        line = worker.stdout.readline()
        assert line, "the worker ended"
        event, _, at = line.partition(" ")
        if event == "job_started" and time.monotonic() - float(at) < JOB_SECONDS / 10:
            return


def test_eight_batched_workers_and_a_kill_complete_each_operation_once(
    services: Services,
) -> None:
    ops = OpsClient(services)
    with ThreadPoolExecutor(8) as pool:
        ids = list(
            pool.map(
                lambda n: (
                    ops.create(
                        OWNER_IDS[n % 4], f"drill-{n}", subject_id=f"s-{n}", retry_delay_seconds=1
                    ).id
                ),
                range(OPERATIONS),
            )
        )
    stop_sweeping = threading.Event()
    sweeper = threading.Thread(target=_sweeping, args=(services, stop_sweeping), daemon=True)
    sweeper.start()
    workers = [_start_worker(services) for _ in range(WORKERS)]
    started = time.monotonic()
    try:
        for worker in workers:
            assert worker.stdout is not None
            assert worker.stdout.readline().strip() == "worker_ready"
        _wait_for(lambda: ops.state_counts().get("succeeded", 0) >= OPERATIONS // 3, "a third")
        victim = workers[0]
        _until_a_job_starts(victim)
        victim.send_signal(signal.SIGKILL)  # it holds that job's lease, at least
        victim.wait(10)
        _wait_for(lambda: ops.state_counts() == {"succeeded": OPERATIONS}, "every operation")
        drained = time.monotonic() - started
    finally:
        for worker in workers[1:]:
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            try:
                worker.wait(20)
            except subprocess.TimeoutExpired:
                worker.kill()
        stop_sweeping.set()
        sweeper.join(5)

    assert [worker.returncode for worker in workers[1:]] == [0] * (WORKERS - 1)
    assert ops.notifications_per_operation() == dict.fromkeys(ids, 1)
    attempts = stored.rows(
        services.db, select(OperationAttempt.operation_id, OperationAttempt.outcome)
    )
    outcomes: dict[str, list[str]] = collections.defaultdict(list)
    for operation_id, outcome in attempts:
        outcomes[operation_id].append(str(outcome))
    successes = {operation_id: seen.count("succeeded") for operation_id, seen in outcomes.items()}
    assert successes == dict.fromkeys(ids, 1)
    rerun = {operation_id: seen for operation_id, seen in outcomes.items() if len(seen) > 1}
    # Only what the killed worker held ran again: at least the job it was killed in, at
    # most its 10 slots, each first expired.
    assert 1 <= len(rerun) <= 10
    assert all(sorted(seen) == ["expired", "succeeded"] for seen in rerun.values())
    report(
        f"batched drill: {OPERATIONS} operations, {WORKERS} SDK workers (one SIGKILLed),"
        f" drained in {drained:.1f} s; {len(rerun)} ran twice (the killed worker's leases)"
    )
