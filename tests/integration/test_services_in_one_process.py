"""Several gRPC services in one ``opsctl serve`` process (what ``opsctl up`` runs, ADR 40):
each on its own address, each line naming its service, one stop for all, and a start
that fails for one ends them all with the one-line message a single service gives."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from durable_ops.cli import EXIT_REFUSED, EXIT_USAGE, GRPC_SERVICES
from durable_ops.settings import service_variable
from durable_ops.stack.children import healthy
from durable_ops.storage import migrate
from tests.support.keys import key_env
from tests.support.ports import free_port

pytestmark = pytest.mark.slow

ALL = list(GRPC_SERVICES)


def _serve(
    tmp_path: Path, database_url: str, *targets: str
) -> tuple[subprocess.Popen[str], dict[str, str]]:
    addresses = {target: f"127.0.0.1:{free_port()}" for target in targets}
    env = {key: value for key, value in os.environ.items() if not key.startswith("OPS_")}
    env |= {service_variable(target, "bind"): address for target, address in addresses.items()}
    env |= {"OPS_DATABASE_URL": database_url, **key_env(), "OPS_LOG_JSON": "true"}
    process = subprocess.Popen(
        [sys.executable, "-m", "durable_ops.cli", "serve", *targets],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    return process, addresses


def _records(lines: list[str], event: str) -> list[dict[str, object]]:
    found = [json.loads(line) for line in lines if line.startswith("{")]
    return [record for record in found if record.get("event") == event]


def test_four_services_answer_on_their_own_addresses_and_stop_together(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ops.sqlite3'}"
    migrate.upgrade(url)
    process, addresses = _serve(tmp_path, url, *ALL)
    try:
        for address in addresses.values():
            while not healthy(f"grpc:{address}"):
                assert process.poll() is None, "it exited during start-up"
                time.sleep(0.1)
        process.send_signal(signal.SIGTERM)
        _out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err
    lines = err.splitlines()
    # Each service says it is ready, and where, under its own name; all stop on one signal.
    serving = _records(lines, "grpc_serving")
    assert {str(r["process"]) for r in serving} == set(ALL)
    assert {str(r["process"]) for r in _records(lines, "grpc_stopped")} == set(ALL)
    assert "Traceback" not in err


def test_a_schema_refused_by_the_services_ends_the_process_with_one_line(tmp_path: Path) -> None:
    process, _addresses = _serve(tmp_path, f"sqlite:///{tmp_path / 'empty.sqlite3'}", *ALL)
    _out, err = process.communicate(timeout=60)
    assert process.returncode == EXIT_REFUSED, err
    last = err.splitlines()[-1]
    assert last.startswith("opsctl serve services: "), last
    assert "opsctl migrate" in last
    assert "Traceback" not in err


def test_only_grpc_services_share_a_process(tmp_path: Path) -> None:
    refused = subprocess.run(
        [sys.executable, "-m", "durable_ops.cli", "serve", "operations", "gateway"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == EXIT_USAGE
    assert refused.stderr.strip() == (
        "opsctl serve: only gRPC services share a process"
        " (operations, notifications, ai-admission, workspace); run gateway on its own"
    )
