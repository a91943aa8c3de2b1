"""A key the services do not trust, or a service that trusts no key, is said, not served.

An operator's findings: a gateway given a key from another keys folder answered
``/readyz`` 200 while every ``/api`` call failed; an AI worker with such a key
claimed in vain for ever; a service started from another directory (the keys
folder is relative) trusted no key and refused every call, all three with at
most a log line.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.ports import free_port


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
