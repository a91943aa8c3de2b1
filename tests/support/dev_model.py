"""An ``opsctl serve dev-model`` process a test started, waited for until it answers."""

from __future__ import annotations

import subprocess
import time
from typing import Any

import httpx


def serving(process: subprocess.Popen[Any], port: int) -> str:
    """The base URL of the dev model ``process`` serves on ``port``, once it answers."""
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 15
    while True:
        try:
            httpx.get(f"{url}/models", timeout=1)
            return url
        except httpx.TransportError:
            assert process.poll() is None, "dev model exited"
            assert time.monotonic() < deadline, "dev model did not come up"
            time.sleep(0.02)
