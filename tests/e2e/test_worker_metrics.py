"""The AI worker exports the local circuit state, and the counters of what its model calls
used, where Prometheus can scrape them."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from durable_ops.model.scope import Role
from tests.conftest import MigratedSqlite
from tests.support.clock import ManualClock
from tests.support.grpc_services import running_services
from tests.support.keys import key_env
from tests.support.ports import free_port, refusing_port


def test_worker_serves_metrics_with_the_circuit_state(
    tmp_path: Path, migrated_sqlite: MigratedSqlite
) -> None:
    url = migrated_sqlite(tmp_path / "ops.sqlite3")
    metrics_port = free_port()
    with running_services(url, ManualClock()) as services:
        worker = subprocess.Popen(
            [sys.executable, "-m", "durable_ops.cli", "serve", "ai-worker"],
            env={
                **os.environ,
                "OPS_WORKERS_AI_OPERATIONS_ENABLED": "true",
                **key_env(Role.WORKER),
                "OPS_OPERATIONS_TARGET": services.target,
                "OPS_WORKSPACE_TARGET": services.target,
                "OPS_AI_LOCAL_URL": f"http://127.0.0.1:{refusing_port()}/v1",
                "OPS_WORKER_METRICS_BIND": f"127.0.0.1:{metrics_port}",
                "OPS_HOST_STORE_DIR": "",
            },
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 60  # a process start: seconds on a loaded machine
            while True:
                try:
                    scraped = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=1)
                    break
                except httpx.TransportError:
                    assert worker.poll() is None, worker.stderr.read() if worker.stderr else ""
                    assert time.monotonic() < deadline, "the worker served no metrics"
                    time.sleep(0.1)
            assert scraped.status_code == 200
            assert "durable_ops_ai_local_circuit_state 0.0" in scraped.text
            # What settled attempts used, by task type, route and model (issue 36).
            assert "# TYPE durable_ops_model_tokens_total counter" in scraped.text
            assert "# TYPE durable_ops_model_seconds_total counter" in scraped.text
        finally:
            worker.terminate()
            worker.wait(timeout=15)
