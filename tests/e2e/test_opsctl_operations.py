"""``opsctl operations`` as an operator runs it: a real process against ``opsctl serve``.

The Operations process serves the operator service next to its own (ADR 19):
a credential signed with the operator's own key (``OPS_SERVICE_KEY``, given to
this command only) lists and cancels another owner's operation, and the service
logs who did it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.model.scope import Role
from tests.support.ai_stack import AiStack, ai_stack, wait_for
from tests.support.keys import key_env

pytestmark = pytest.mark.slow


def _opsctl(stack: AiStack, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "durable_ops.cli", "operations", *args],
        env={**os.environ, **stack.env, **key_env(Role.OPERATOR)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_opsctl_operations_against_a_running_operations_service(tmp_path: Path) -> None:
    with ai_stack(f"sqlite:///{tmp_path / 'ops.sqlite3'}", worker=False) as stack:
        created = stack.operations.CreateOperation(
            pb.CreateOperationRequest(
                task_type="strategy.snapshot",
                idempotency_key="k-opsctl",
                subject=pb.Subject(type="job", id="job-1"),
            ),
            metadata=AiStack.md("bob"),
        ).operation

        listed = _opsctl(stack, "list", "--json", "--owner", "bob", "--as", "carol")
        assert listed.returncode == 0, listed.stderr
        assert [
            (row["id"], row["owner_id"], row["state"]) for row in json.loads(listed.stdout)
        ] == [(created.id, "bob", "queued")]

        cancelled = _opsctl(stack, "cancel", created.id, "--json", "--as", "carol")
        assert cancelled.returncode == 0, cancelled.stderr
        assert json.loads(cancelled.stdout)[0]["state"] == "cancelled"
        owners_view = stack.operations.GetOperation(
            pb.GetOperationRequest(operation_id=created.id), metadata=AiStack.md("bob")
        )
        assert owners_view.state == pb.OPERATION_STATE_CANCELLED

        logged = wait_for(
            lambda: stack.logs.events("operations", "operator_cancel") or None,
            timeout=10,
            what="the operator's cancel in the service log",
        )
        assert (logged[0]["operator"], logged[0]["operation_id"], logged[0]["owner"]) == (
            "carol",
            created.id,
            "bob",
        )
