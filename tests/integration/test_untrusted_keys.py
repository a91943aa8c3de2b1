"""A key the services do not trust, or a service that trusts no key, is said, not served.

An operator's findings: a gateway given a key from another keys folder answered
``/readyz`` 200 while every ``/api`` call failed; an AI worker with such a key
claimed in vain for ever; a service started from another directory (the keys
folder is relative) trusted no key and refused every call, all three with at
most a log line.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from durable_ops.model.errors import Unauthenticated
from durable_ops.rpc import credentials
from durable_ops.rpc.keys import (
    PUBLIC_DIR,
    PUBLIC_SUFFIX,
    RESCAN_SECONDS,
    SigningKey,
    create_key_pair,
)
from durable_ops.worker import Attempt, Worker
from tests.support.gateway import bearer, gateway_client, make_app, run
from tests.support.grpc_services import Services
from tests.support.keys import key_env, keys_dir
from tests.support.operations_client import TASK
from tests.support.ports import free_port

BACKENDS = ["ai_admission", "notifications", "operations", "workspace"]


def _opsctl(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "durable_ops.cli", *args],
        env={**os.environ, **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_gateway_whose_key_the_backends_refuse_is_not_ready(
    sqlite_services: Services, tmp_path: Path
) -> None:
    # `OPS_SERVICE_KEYS_DIR=/elsewhere opsctl keys init gateway`: a key nobody trusts.
    foreign = create_key_pair(tmp_path / "elsewhere", "gateway")
    kid = SigningKey.load(foreign).kid
    app = make_app(sqlite_services.target, service_key=str(foreign))

    async def scenario() -> None:
        async with gateway_client(app) as client:
            assert (await client.get("/api/operations", headers=bearer("alice"))).status_code == 503
            for _ in range(3):  # a balancer asks again and again
                ready = await client.get("/readyz")
                assert ready.status_code == 503
                body = ready.json()
                assert body["code"] == "not_ready"
                assert body["backends"] == dict.fromkeys(BACKENDS, "service_credential_refused")
                assert "operations (service_credential_refused)" in body["detail"]

    with capture_logs() as logs:
        run(scenario())
    refusals = [event for event in logs if event["event"] == "service_credential_refused"]
    assert sorted(event["backend"] for event in refusals) == BACKENDS  # once each, not per ask
    for event in refusals:
        assert event["log_level"] == "error"
        assert (event["key"], event["kid"]) == (str(foreign), kid)
        assert str(foreign) in event["say"]


def _ai_worker_env(services: Services, key: Path) -> dict[str, str]:
    """``opsctl serve ai-worker`` signing with ``key``, against ``services``."""
    return {
        **key_env(),
        "OPS_SERVICE_KEY": str(key),
        "OPS_OPERATIONS_TARGET": services.target,
        "OPS_WORKSPACE_TARGET": services.target,
        "OPS_WORKERS_AI_OPERATIONS_ENABLED": "true",
        "OPS_WORKER_CONCURRENCY": "1",  # no model server to ask for its slots
    }


def test_an_ai_worker_whose_key_operations_refuses_exits_2_saying_so(
    sqlite_services: Services, tmp_path: Path
) -> None:
    foreign = create_key_pair(tmp_path / "elsewhere", "worker")
    done = _opsctl("serve", "ai-worker", env=_ai_worker_env(sqlite_services, foreign), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    last = done.stderr.splitlines()[-1]
    assert last.startswith(
        f"opsctl serve ai-worker: the Operations service refuses this worker's service key"
        f" {foreign} (kid {SigningKey.load(foreign).kid})"
    ), last
    assert "another keys folder, or a revoked one" in last
    assert "Traceback" not in done.stderr


def test_an_ai_worker_whose_key_is_revoked_while_it_runs_exits_2_saying_so(
    sqlite_services: Services, tmp_path: Path
) -> None:
    """Trusted at start, then its public key removed (``opsctl keys rotate`` and the old
    one dropped): it claimed in vain for ever with one warning; restarted, it would read
    its rotated key file."""
    name = f"worker-revoked{secrets.token_hex(3)}"
    key = create_key_pair(keys_dir(), name)
    time.sleep(RESCAN_SECONDS + 0.1)  # the services read their keys folder again by then
    env = {**os.environ, **_ai_worker_env(sqlite_services, key), "OPS_LOG_JSON": "true"}
    command = [sys.executable, "-m", "durable_ops.cli", "serve", "ai-worker"]
    worker = subprocess.Popen(command, env=env, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    try:
        assert worker.stderr is not None
        for line in worker.stderr:  # to its first claim: the key was accepted at start
            if '"worker_started"' in line:
                break
        (keys_dir() / PUBLIC_DIR / f"{name}{PUBLIC_SUFFIX}").unlink()
        # Once the services have read their keys folder again, the verdicts they keep up to a
        # minute (``rpc.credentials``) are forgotten: they run in this process.
        time.sleep(RESCAN_SECONDS + 0.1)
        credentials._cache.clear()
        _, rest = worker.communicate(timeout=30)  # to its exit: refused at its next claim
        assert worker.returncode == 2, rest
    finally:
        worker.kill()
        worker.wait()
    last = rest.splitlines()[-1]
    assert last.startswith(
        f"opsctl serve ai-worker: the Operations service refuses this worker's service key {key}"
    ), last
    assert "Traceback" not in rest


@pytest.mark.parametrize("service", ["operations", "workspace"])
def test_a_service_that_trusts_no_key_refuses_to_start(service: str, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {
        "OPS_SERVICE_KEYS_DIR": "var/keys",  # the default: relative, and none here
        "OPS_DATABASE_URL": f"sqlite:///{tmp_path / 'ops.sqlite3'}",
        f"OPS_{service.upper()}_BIND": f"127.0.0.1:{free_port()}",
    }
    done = _opsctl("serve", service, env=env, cwd=elsewhere)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"opsctl serve {service}: no public service keys in"
        f" {elsewhere.resolve() / 'var' / 'keys' / 'public'} (OPS_SERVICE_KEYS_DIR), so every"
        " call would be refused: set OPS_SERVICE_KEYS_DIR to the folder that holds them (an"
        " absolute path), or make them there with `opsctl keys init`"
    ]


def test_a_service_whose_only_key_file_is_unusable_names_it_in_its_refusal(
    tmp_path: Path,
) -> None:
    """A folder of corrupt keys read as "no public service keys": the operator who put one
    there was told to look for another folder."""
    public = tmp_path / "keys" / PUBLIC_DIR
    public.mkdir(parents=True)
    (public / f"operator{PUBLIC_SUFFIX}").write_text("truncated in a copy")
    env = {
        "OPS_SERVICE_KEYS_DIR": str(tmp_path / "keys"),
        "OPS_DATABASE_URL": f"sqlite:///{tmp_path / 'ops.sqlite3'}",
        "OPS_OPERATIONS_BIND": f"127.0.0.1:{free_port()}",
    }
    done = _opsctl("serve", "operations", env=env, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"opsctl serve operations: no usable public service keys in {public.resolve()}"
        " (OPS_SERVICE_KEYS_DIR), so every call would be refused; skipped: operator.pub"
        " (not a PEM public key)"
    ]


def test_a_worker_whose_key_is_refused_at_a_claim_stops_and_run_raises_it(
    sqlite_services: Services, tmp_path: Path
) -> None:
    """A key revoked while the worker runs (or rotated away since it was read) fails every
    claim: it stopped claiming after one warning and never ended, where a restart would
    read the rotated key file."""
    foreign = SigningKey.load(create_key_pair(tmp_path / "elsewhere", "worker"))
    worker = Worker(sqlite_services.target, foreign)

    @worker.handler(TASK)
    async def handle(attempt: Attempt) -> None:
        raise AssertionError("nothing can be claimed")

    async def scenario() -> None:
        with pytest.raises(Unauthenticated):
            await asyncio.wait_for(worker.run(stop_on_signals=False), 20)

    asyncio.run(scenario())
