"""A worker written as the README shows it (``asyncio.run(worker.run())``, no handler of
its own) hands its running attempt back on Ctrl-C or SIGTERM: released, queued at once,
the attempt not spent. Timeouts only keep a broken build from hanging."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest
from sqlalchemy import select

from durable_ops.clock import utc_now
from durable_ops.model.scope import Role
from durable_ops.storage.schema import OperationAttempt
from tests.support import stored
from tests.support.grpc_services import Services, running_services
from tests.support.keys import key_env
from tests.support.operations_client import ALICE, QUEUED, TASK, OpsClient

HANG_GUARD = 30.0


@pytest.fixture
def services(db_url: str) -> Iterator[Services]:
    with running_services(db_url, utc_now) as running:
        yield running


def _until_printed(worker: subprocess.Popen[str], word: str) -> None:
    """Read the worker's lines (its log's among them) until one starts with ``word``."""
    assert worker.stdout is not None
    for line in worker.stdout:
        if line.startswith(word):
            return
    raise AssertionError(f"the worker ended before it printed {word}")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_releases_the_running_attempt(services: Services, signum: int) -> None:
    ops = OpsClient(services)
    created = ops.create(ALICE, f"k-signal-{signum}").id
    worker = subprocess.Popen(
        [sys.executable, "-m", "tests.support.sdk_worker", services.target, TASK, "60"],
        env={**os.environ, **key_env(Role.WORKER)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _until_printed(worker, "job_started")  # it holds the lease now
        worker.send_signal(signum)
        _, errors = worker.communicate(timeout=HANG_GUARD)
    finally:
        if worker.poll() is None:
            worker.kill()
    assert worker.returncode == 0, errors
    assert "Traceback" not in errors
    row = ops.get(ALICE, created)
    assert (row.state, row.attempt) == (QUEUED, 0)  # the attempt was not spent
    outcomes = stored.rows(services.db, select(OperationAttempt.outcome))
    assert [str(outcome) for (outcome,) in outcomes] == ["released"]
