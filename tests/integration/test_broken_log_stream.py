"""A service whose log reader is gone keeps working: what ``opsctl up``'s children met when
their supervisor was killed (their stderr, a pipe to it, broke) before they were stopped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.api.operations.v1 import operations_pb2_grpc as pb_grpc
from durable_ops.model.scope import Role
from durable_ops.storage import migrate
from tests.support.grpc_services import metadata
from tests.support.keys import key_env
from tests.support.ports import free_port

pytestmark = pytest.mark.slow


def test_a_service_whose_log_pipe_broke_answers_and_its_sweeper_goes_on(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ops.sqlite3'}"
    migrate.upgrade(url)
    address = f"127.0.0.1:{free_port()}"
    env = {key: value for key, value in os.environ.items() if not key.startswith("OPS_")}
    env |= {"OPS_OPERATIONS_BIND": address, "OPS_DATABASE_URL": url, **key_env()}
    env |= {"OPS_LOG_JSON": "true", "OPS_LOG_LEVEL": "info"}
    # As `opsctl up` runs a child: stdout and stderr one pipe, read by the parent.
    process = subprocess.Popen(
        [sys.executable, "-m", "durable_ops.cli", "serve", "operations"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith("{") and json.loads(line).get("event") == "grpc_serving":
                break
        else:
            raise AssertionError(f"it exited during start-up ({process.wait()})")
        process.stdout.close()  # the reader is gone: every log line now meets EPIPE

        with grpc.insecure_channel(address) as channel:
            stub = pb_grpc.OperationsServiceStub(channel)
            owner = metadata(Role.GATEWAY, "alice")
            created = stub.CreateOperation(
                pb.CreateOperationRequest(
                    task_type="strategy.snapshot",
                    idempotency_key="after-the-pipe-broke",
                    subject=pb.Subject(type="job", id="job-1"),
                ),
                metadata=owner,
                timeout=10,
            )
            assert created.created
            worker = metadata(Role.WORKER)
            claim = pb.ClaimOperationRequest(task_types=["strategy.snapshot"], lease_seconds=5)
            first = stub.ClaimOperation(claim, metadata=worker, timeout=10)
            assert first.claimed.operation.id == created.operation.id
            # Its lease runs out unrenewed: the sweeper (which logs each sweep) ends the
            # attempt, and the operation is no longer `running`.
            get = pb.GetOperationRequest(operation_id=created.operation.id)
            deadline = time.monotonic() + 20
            running = pb.OPERATION_STATE_RUNNING
            while stub.GetOperation(get, metadata=owner, timeout=10).state == running:
                assert time.monotonic() < deadline, "no sweep ended the expired lease"
                time.sleep(0.5)
        assert process.poll() is None
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
