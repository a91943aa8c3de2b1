"""`opsctl up` brings up the whole product, and Ctrl-C leaves no process behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.support.ports import free_port

pytestmark = pytest.mark.slow
STARTUP_SECONDS = 90


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        children = (task / "children").read_text().split()
        found.update(int(child) for child in children)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


@pytest.mark.parametrize(
    ("engine", "signum"),
    [("sqlite", signal.SIGINT), ("mariadb", signal.SIGTERM)],
    ids=["sqlite-ctrl-c", "mariadb-sigterm"],
)
def test_up_serves_the_ui_and_stops_every_child(
    tmp_path: Path, engine: str, signum: signal.Signals, request: pytest.FixtureRequest
) -> None:
    ports = {name: free_port() for name in ("gateway", "ops", "notes", "admit", "ws", "model")}
    env = {
        **os.environ,
        "OPS_GATEWAY_BIND": f"127.0.0.1:{ports['gateway']}",
        "OPS_OPERATIONS_BIND": f"127.0.0.1:{ports['ops']}",
        "OPS_OPERATIONS_TARGET": f"127.0.0.1:{ports['ops']}",
        "OPS_NOTIFICATIONS_BIND": f"127.0.0.1:{ports['notes']}",
        "OPS_NOTIFICATIONS_TARGET": f"127.0.0.1:{ports['notes']}",
        "OPS_AI_ADMISSION_BIND": f"127.0.0.1:{ports['admit']}",
        "OPS_AI_ADMISSION_TARGET": f"127.0.0.1:{ports['admit']}",
        "OPS_WORKSPACE_BIND": f"127.0.0.1:{ports['ws']}",
        "OPS_WORKSPACE_TARGET": f"127.0.0.1:{ports['ws']}",
        "OPS_DEV_MODEL_BIND": f"127.0.0.1:{ports['model']}",
        "OPS_AI_LOCAL_URL": f"http://127.0.0.1:{ports['model']}/v1",
        "OPS_HOST_STORE_DIR": "",
    }
    if engine == "sqlite":
        url = f"sqlite:///{tmp_path / 'up.sqlite3'}"
    else:  # an empty database: `opsctl up` migrates it
        url = request.getfixturevalue("make_mariadb_database")()
    up = subprocess.Popen(
        [sys.executable, "-m", "durable_ops.cli", "up", "--database-url", url],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    ready = threading.Event()

    def read() -> None:
        assert up.stdout is not None
        for line in up.stdout:
            lines.append(line)
            if "sign in:" in line:
                ready.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        assert ready.wait(STARTUP_SECONDS), "".join(lines[-40:])
        output = "".join(lines)
        assert f"durable-ops is up at http://127.0.0.1:{ports['gateway']}/" in output
        login = re.search(r"sign in: (\S+)", output)
        assert login is not None
        with httpx.Client() as client:
            signed_in = client.get(login.group(1), follow_redirects=True)
            assert signed_in.status_code == 200
            assert str(signed_in.url).endswith("/operations")
            settings = client.get(f"http://127.0.0.1:{ports['gateway']}/api/settings/ai")
            assert settings.json()["plan"] == "pro"
        prefixed = {line.split("|")[0].strip() for line in lines if "|" in line}
        assert {"operations", "gateway", "ai-worker"} <= prefixed
        children = _children(up.pid)
        assert len(children) == 7
    finally:
        up.send_signal(signum)
        code = up.wait(timeout=30)
    assert code == 0
    deadline = time.monotonic() + 5
    while any(_alive(child) for child in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [child for child in children if _alive(child)] == []
