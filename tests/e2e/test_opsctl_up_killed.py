"""A killed ``opsctl up`` (SIGKILL: no handler runs) takes its children with it, and the
next ``opsctl up`` from the same directory starts on the same ports: idle, and while
the AI worker runs an analysis (whose hand-back the dying services can no longer take:
it is left to its lease, and the worker does not wait for them)."""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

import httpx
import pytest

from tests.support import procs
from tests.support.ports import free_port
from tests.support.product import Product, opsctl_up, product_env

pytestmark = pytest.mark.slow

GONE_SECONDS = 5.0
JOB = {"title": "Engineer", "company": "Acme", "description": "Senior Python engineer: gRPC"}
HANG_GUARD = 30.0


def _listened(address: str) -> bool:
    """Something still holds ``address`` (what `opsctl up`'s own check would refuse)."""
    host, _, port = address.rpartition(":")
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, int(port)))
        except OSError:
            return True
    return False


def _binds(env: dict[str, str]) -> list[str]:
    return [value for key, value in env.items() if key.startswith("OPS_") and key.endswith("_BIND")]


def _kill_and_wait_for_children(
    product: Product, binds: list[str]
) -> tuple[list[bytes], list[str]]:
    """SIGKILL ``opsctl up``; what is left after ``GONE_SECONDS``: the children still
    running (their command lines) and the addresses still held."""
    children = procs.children(product.process.pid)
    assert len(children) == 4
    assert all(_listened(address) for address in binds)
    os.kill(product.process.pid, signal.SIGKILL)
    product.process.wait(timeout=10)
    deadline = time.monotonic() + GONE_SECONDS
    while time.monotonic() < deadline and (
        any(procs.alive(child) for child in children) or any(_listened(a) for a in binds)
    ):
        time.sleep(0.1)
    left = [Path(f"/proc/{c}/cmdline").read_bytes() for c in children if procs.alive(c)]
    for child in children:  # a failed run must not leave them running either
        if procs.alive(child):
            os.kill(child, signal.SIGKILL)
    return left, [address for address in binds if _listened(address)]


def _starts_again(url: str, env: dict[str, str], cwd: Path) -> None:
    """The same directory, the same ports: its lock and address file are the killed one's."""
    with opsctl_up(url, env, cwd=cwd) as again:
        with httpx.Client() as client:
            assert again.sign_in(client).status_code == 200
        assert again.stop() == 0


def test_a_killed_opsctl_up_leaves_no_child_and_frees_every_port(tmp_path: Path) -> None:
    env = product_env(OPS_DEV_MODEL_SECONDS="0")
    url = f"sqlite:///{tmp_path / 'up.sqlite3'}"
    with opsctl_up(url, env, cwd=tmp_path) as product:
        assert _kill_and_wait_for_children(product, _binds(env)) == ([], [])
    _starts_again(url, env, tmp_path)


def test_killed_during_an_analysis_the_worker_goes_as_fast_and_frees_its_metrics_port(
    tmp_path: Path,
) -> None:
    # The worker's metrics port, held by the worker alone: what the next start found taken.
    env = product_env(OPS_WORKER_METRICS_BIND=f"127.0.0.1:{free_port()}")
    url = f"sqlite:///{tmp_path / 'up.sqlite3'}"
    with opsctl_up(url, env, cwd=tmp_path) as product:
        gateway = product.url.rstrip("/")
        with httpx.Client(base_url=gateway, headers={"Origin": gateway}) as client:
            assert product.sign_in(client).status_code == 200
            job = client.post("/api/jobs", json=JOB)
            assert job.status_code == 201, job.text
            started = client.post(
                f"/api/jobs/{job.json()['id']}/strategy-snapshot",
                json={},
                headers={"Idempotency-Key": "killed-during-an-analysis"},
            )
            assert started.status_code == 202, started.text
            status = started.json()["status_url"]
            deadline = time.monotonic() + HANG_GUARD
            # The development model takes 4 s an answer under `opsctl up`: under way, it
            # reports progress while the worker holds its lease.
            while client.get(status).json().get("progress_percent", 0) == 0:
                assert time.monotonic() < deadline, client.get(status).text
                time.sleep(0.1)
            assert client.get(status).json()["state"] == "running"
        assert _kill_and_wait_for_children(product, _binds(env)) == ([], [])
    _starts_again(url, env, tmp_path)
