"""A killed ``opsctl up`` (SIGKILL: no handler runs) takes its children with it, and the
next ``opsctl up`` from the same directory starts on the same ports."""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

import httpx
import pytest

from tests.support import procs
from tests.support.product import opsctl_up, product_env

pytestmark = pytest.mark.slow

GONE_SECONDS = 5.0


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


def test_a_killed_opsctl_up_leaves_no_child_and_frees_every_port(tmp_path: Path) -> None:
    env = product_env(OPS_DEV_MODEL_SECONDS="0")
    binds = [
        value for key, value in env.items() if key.startswith("OPS_") and key.endswith("_BIND")
    ]
    url = f"sqlite:///{tmp_path / 'up.sqlite3'}"
    with opsctl_up(url, env, cwd=tmp_path) as product:
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
        assert left == []
        assert [address for address in binds if _listened(address)] == []

    # The same directory, the same ports: its lock and address file are the killed one's.
    with opsctl_up(url, env, cwd=tmp_path) as again:
        with httpx.Client() as client:
            assert again.sign_in(client).status_code == 200
        assert again.stop() == 0
