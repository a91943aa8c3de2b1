"""`opsctl up` brings up the whole product, and Ctrl-C leaves no process behind."""

from __future__ import annotations

import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.support.product import opsctl_up, product_env

pytestmark = pytest.mark.slow


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
    # not `opsctl up`'s watchable pace
    env = product_env(OPS_DEV_MODEL_SECONDS="0")
    if engine == "sqlite":
        url = f"sqlite:///{tmp_path / 'up.sqlite3'}"
    else:  # an empty database: `opsctl up` migrates it
        url = request.getfixturevalue("make_mariadb_database")()
    with opsctl_up(url, env, cwd=tmp_path) as product:
        gateway = product.url.rstrip("/")
        assert gateway == f"http://{env['OPS_GATEWAY_BIND']}"
        with httpx.Client() as client:
            signed_in = client.get(product.login, follow_redirects=True)
            assert signed_in.status_code == 200
            assert str(signed_in.url).endswith("/operations")
            settings = client.get(f"{gateway}/api/settings/ai")
            assert settings.json()["plan"] == "pro"
        prefixed = {line.split("|")[0].strip() for line in product.lines if "|" in line}
        assert {"operations", "gateway", "ai-worker"} <= prefixed
        children = _children(product.process.pid)
        assert len(children) == 7
        code = product.stop(signum)
    assert code == 0
    deadline = time.monotonic() + 5
    while any(_alive(child) for child in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [child for child in children if _alive(child)] == []


def test_a_token_from_opsctl_token_works_with_the_stack_and_survives_a_restart(
    tmp_path: Path,
) -> None:
    env = product_env(OPS_DEV_MODEL_SECONDS="0")
    for name in ("OPS_JWT_SECRET", "OPS_SERVICE_SECRET"):
        env.pop(name, None)  # what a new user has: nothing set
    url = f"sqlite:///{tmp_path / 'up.sqlite3'}"
    token = subprocess.run(
        [sys.executable, "-m", "durable_ops.cli", "token", "--user", "alice"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    kept = tmp_path / "var" / "secrets.json"
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    bearer = {"Authorization": f"Bearer {token}"}
    for _run in ("first start", "restart"):
        with opsctl_up(url, env, cwd=tmp_path) as product:
            reply = httpx.get(f"{product.url.rstrip('/')}/api/settings/ai", headers=bearer)
            assert reply.status_code == 200, reply.text
            assert product.stop() == 0
