"""`opsctl up` brings up the whole product, and Ctrl-C leaves no process behind."""

from __future__ import annotations

import json
import os
import pty
import random
import select
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from durable_ops.hoststore import acquire
from durable_ops.stack.children import healthy
from durable_ops.storage.migrate import upgrade
from tests.support import disks, procs
from tests.support.product import opsctl_up, product_env

pytestmark = pytest.mark.slow


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
            signed_in = product.sign_in(client)
            assert signed_in.status_code == 200
            assert str(signed_in.url).endswith("/operations")
            settings = client.get(f"{gateway}/api/settings/ai")
            assert settings.json()["plan"] == "pro"
        wanted = {"up", "operations", "gateway", "ai-worker"}
        deadline = time.monotonic() + 30  # the worker's first line may follow the stack's
        while not wanted <= {r["process"] for r in product.records} and time.monotonic() < deadline:
            time.sleep(0.1)
        processes = {record["process"] for record in product.records}  # every line is JSON
        assert wanted <= processes
        children = procs.children(product.process.pid)
        # The four gRPC services share one process: what `opsctl up` said it starts.
        (starting,) = product.events("starting")
        assert starting["processes"] == ["services", "dev-model", "gateway", "ai-worker"]
        assert starting["message"].startswith("starting 4 processes: services (operations,")
        assert len(children) == 4
        shared = b"serve\0operations\0notifications\0workspace\0ai-admission"
        assert [c for c in children if shared in Path(f"/proc/{c}/cmdline").read_bytes()] != []
        hosted = {r["process"] for r in product.records if r.get("event") == "grpc_serving"}
        assert hosted == {"operations", "notifications", "workspace", "ai-admission"}
        code = product.stop(signum)
        relayed = time.monotonic() + 5
        while not product.events("stopped") and time.monotonic() < relayed:
            time.sleep(0.05)  # the relay's last lines
        # It says what it waits for (the worker first, handing its work back) and how long.
        (stopping,) = product.events("stopping")
        assert stopping["workers"] == ["ai-worker"]
        assert sorted(stopping["services"]) == ["dev-model", "gateway", "services"]
        (stopped,) = product.events("stopped")
        assert stopped["message"] == f"stopped in {stopped['seconds']:.1f} s"
    assert code == 0
    deadline = time.monotonic() + 5
    while any(procs.alive(child) for child in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [child for child in children if procs.alive(child)] == []


def test_on_a_schema_a_newer_release_wrote_its_own_warning_is_a_json_line_too(
    tmp_path: Path,
) -> None:
    """The stack's own log events were structlog's default: text on stdout, among lines
    that are all JSON when piped. (``opsctl_up`` reads each line, stderr's too, as JSON.)"""
    database = tmp_path / "up.sqlite3"
    upgrade(f"sqlite:///{database}")
    with sqlite3.connect(database) as connection:
        connection.execute("UPDATE alembic_version SET version_num = '0099_future'")
    env = product_env(OPS_DEV_MODEL_SECONDS="0")
    with opsctl_up(f"sqlite:///{database}", env, cwd=tmp_path) as product:
        warned = [r for r in product.events("schema_newer_than_code") if r["process"] == "up"]
        assert warned, product.lines
        assert warned[0]["database_revision"] == "0099_future"
        assert product.stop() == 0


def test_a_token_from_opsctl_token_works_with_the_stack_and_survives_a_restart(
    tmp_path: Path,
) -> None:
    env = product_env(OPS_DEV_MODEL_SECONDS="0")
    for name in ("OPS_JWT_SECRET", "OPS_SERVICE_KEYS_DIR", "OPS_SERVICE_KEY"):
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
    keys = tmp_path / "var" / "keys"
    public_keys: list[bytes] = []
    for _run in ("first start", "restart"):
        with opsctl_up(url, env, cwd=tmp_path) as product:
            reply = httpx.get(f"{product.url.rstrip('/')}/api/settings/ai", headers=bearer)
            assert reply.status_code == 200, reply.text
            assert product.stop() == 0
        # The service keys were made once, private, and kept across the restart too.
        assert stat.S_IMODE((keys / "gateway" / "gateway.key").stat().st_mode) == 0o600
        public_keys.append((keys / "public" / "gateway.pub").read_bytes())
    assert public_keys[0] == public_keys[1]


def test_a_gateway_beyond_loopback_serves_no_dev_login_and_answers_only_its_names(
    tmp_path: Path,
) -> None:
    env = product_env(OPS_DEV_MODEL_SECONDS="0")
    port = env["OPS_GATEWAY_BIND"].rpartition(":")[2]
    env["OPS_GATEWAY_BIND"] = f"0.0.0.0:{port}"
    token = subprocess.run(
        [sys.executable, "-m", "durable_ops.cli", "token", "--user", "alice"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    with opsctl_up(f"sqlite:///{tmp_path / 'up.sqlite3'}", env, cwd=tmp_path) as product:
        # Printed with a name the gateway answers to, not the wildcard.
        assert product.url == f"http://127.0.0.1:{port}/"
        [off] = product.events("dev_login_off")
        assert f"0.0.0.0:{port}" in off["message"]
        assert "not on loopback" in off["message"]
        assert "opsctl token" in product.events("sign_in")[0]["message"]
        with httpx.Client() as client:
            assert product.sign_in(client).status_code == 404
            page = client.get(product.url)
            assert page.status_code == 200
            assert "/auth/dev-login" not in page.text
            foreign = client.get(f"{product.url}api/operations", headers={"Host": "rebind.example"})
            assert foreign.status_code == 400
            assert foreign.json()["code"] == "host_not_allowed"
            # uvicorn's own default believed X-Forwarded-Proto from loopback; no longer.
            origin = product.url.rstrip("/")
            signed_in = client.post(
                f"{origin}/auth/login",
                json={"token": token},
                headers={"Origin": origin, "X-Forwarded-Proto": "https"},
            )
            assert signed_in.status_code == 200, signed_in.text
            assert "secure" not in signed_in.headers["set-cookie"].lower()


def _up(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "durable_ops.cli", "up", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _free_run(count: int) -> int:
    """A base port with ``count`` free ports from it (retried: another test may take one)."""
    for _attempt in range(50):
        base = random.randrange(20000, 60000)
        probes = [socket.socket() for _ in range(count)]
        try:
            for offset, probe in enumerate(probes):
                probe.bind(("127.0.0.1", base + offset))
            return base
        except OSError:
            continue
        finally:
            for probe in probes:
                probe.close()
    raise AssertionError(f"no {count} consecutive free ports")


def _read_until(master: int, needle: bytes, seconds: float) -> bytes:
    seen = b""
    deadline = time.monotonic() + seconds
    while needle not in seen and time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                seen += os.read(master, 65536)
            except OSError:  # the other side closed
                break
    return seen


def test_a_host_store_another_worker_holds_is_a_clear_message(tmp_path: Path) -> None:
    """Its AI worker would be refused the store at every restart until the stack gave up
    (a restored copy started beside the original, sharing OPS_HOST_STORE_DIR)."""
    store = tmp_path / "host-store"
    store.mkdir(mode=0o700)
    env = product_env(OPS_DEV_MODEL_SECONDS="0", OPS_HOST_STORE_DIR=str(store))
    holder = acquire(store, "the-other-worker")
    try:
        refused = _up(
            "--database-url", f"sqlite:///{tmp_path / 'up.sqlite3'}", env=env, cwd=tmp_path
        )
    finally:
        holder.close()
    assert refused.returncode == 2
    [event] = [json.loads(line) for line in refused.stdout.splitlines()]
    assert event["event"] == "host_store_held"
    assert f"the host store in {store} (OPS_HOST_STORE_DIR) is held" in event["message"]
    assert not (tmp_path / "var").exists()  # refused before anything was made


def test_a_taken_port_is_a_clear_message_and_port_base_moves_every_port(tmp_path: Path) -> None:
    env = product_env(OPS_DEV_MODEL_SECONDS="0")
    database = tmp_path / "up.sqlite3"
    gateway = env["OPS_GATEWAY_BIND"]
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", int(gateway.rsplit(":", 1)[1])))
        squatter.listen()
        refused = _up("--database-url", f"sqlite:///{database}", env=env, cwd=tmp_path)
    assert refused.returncode == 2
    [event] = [json.loads(line) for line in refused.stdout.splitlines()]
    assert event["event"] == "address_in_use"
    assert f"{gateway} is already in use (OPS_GATEWAY_BIND)" in event["message"]
    assert "--port-base N" in event["message"]
    assert "Traceback" not in refused.stdout + refused.stderr
    assert not database.exists()  # refused before anything was touched

    # On a terminal: --port-base moves every address, and the output is prefixed text.
    base = _free_run(6)
    url = f"sqlite:///{database}"
    master, slave = pty.openpty()
    process = subprocess.Popen(
        [
            sys.executable,
            *("-m", "durable_ops.cli", "up", "--port-base", str(base)),
            f"--database-url={url}",
        ],
        env={key: value for key, value in env.items() if not key.endswith(("_BIND", "_TARGET"))}
        | {"OPS_AI_LOCAL_URL": "http://127.0.0.1:8090/v1"},  # the default: follows the dev model
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
    )
    os.close(slave)
    try:
        seen = _read_until(master, b"sign in:", 90)
        # The worker's health is "alive": its first line may come after the stack is up.
        seen += b"" if b"ai-worker |" in seen else _read_until(master, b"ai-worker |", 30)
        shown = seen.decode(errors="replace")
        assert f"durable-ops is up at http://127.0.0.1:{base}/" in shown, shown
        prefixed = {line.split("|")[0].strip() for line in shown.splitlines() if " | " in line}
        assert {"services", "gateway", "ai-worker"} <= prefixed
        # A service of the shared process names itself in its short lines.
        assert f"services  | operations ready on 127.0.0.1:{base + 1}" in shown, shown
        assert '{"event"' not in shown  # text, not JSON
        assert httpx.get(f"http://127.0.0.1:{base}/healthz").status_code == 200
        for port in range(base + 1, base + 5):  # the gRPC services moved with it
            assert healthy(f"grpc:127.0.0.1:{port}")
        assert healthy(f"http:http://127.0.0.1:{base + 5}/v1/models")
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0
        os.close(master)


def test_a_full_disk_is_one_line_and_exit_1_not_a_traceback(tmp_path: Path) -> None:
    with disks.small_disk(tmp_path / "disk", size="1m") as disk:
        disks.fill(disk / "filler")
        env = product_env(OPS_DEV_MODEL_SECONDS="0")
        full = _up("--database-url", f"sqlite:///{disk / 'up.sqlite3'}", env=env, cwd=disk)
    assert full.returncode == 1, full.stdout + full.stderr
    assert "Traceback" not in full.stdout + full.stderr
    [event] = [json.loads(line) for line in full.stdout.splitlines()]
    assert event["event"] == "cannot_write"
    assert "No space left on device" in event["message"], event


def test_a_killed_child_comes_back_and_the_page_keeps_working(tmp_path: Path) -> None:
    env = product_env(OPS_DEV_MODEL_SECONDS="0")
    with opsctl_up(f"sqlite:///{tmp_path / 'up.sqlite3'}", env, cwd=tmp_path) as product:
        gateway = product.url.rstrip("/")
        with httpx.Client() as client:
            assert product.sign_in(client).status_code == 200
            [victim] = [
                pid
                for pid in procs.children(product.process.pid)
                if b"serve\0gateway" in Path(f"/proc/{pid}/cmdline").read_bytes()
            ]
            os.kill(victim, signal.SIGKILL)
            deadline = time.monotonic() + 30
            while not product.events("restarting") and time.monotonic() < deadline:
                time.sleep(0.1)
            [restarting] = product.events("restarting")
            assert restarting["child"] == "gateway"
            assert "was killed by SIGKILL; restarting in" in restarting["message"]
            while not healthy(f"http:{gateway}/healthz") and time.monotonic() < deadline:
                time.sleep(0.1)
            # The same session, on the new gateway: the page and its API work.
            assert client.get(f"{gateway}/operations").status_code == 200
            assert client.get(f"{gateway}/api/settings/ai").json()["plan"] == "pro"
        assert product.process.poll() is None
        assert product.stop() == 0


def test_opsctl_operations_finds_a_stack_moved_by_port_base_and_says_when_it_is_gone(
    tmp_path: Path,
) -> None:
    base = _free_run(7)
    env = product_env(OPS_DEV_MODEL_SECONDS="0")
    env = {key: value for key, value in env.items() if not key.endswith(("_BIND", "_TARGET"))}
    env["OPS_AI_LOCAL_URL"] = "http://127.0.0.1:8090/v1"  # the default: follows the dev model
    stack_file = tmp_path / "var" / "stack.json"

    def operations_list() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "durable_ops.cli", "operations", "list", "--json"],
            env=env,  # no OPS_OPERATIONS_TARGET: what a user has after `scripts/run.sh`
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    url = f"sqlite:///{tmp_path / 'up.sqlite3'}"
    with opsctl_up(url, env, tmp_path, "--port-base", str(base)) as product:
        assert product.url == f"http://127.0.0.1:{base}/"
        assert stat.S_IMODE(stack_file.stat().st_mode) == 0o600
        written = json.loads(stack_file.read_text())
        assert written["gateway_url"] == product.url
        assert written["operations_target"] == f"127.0.0.1:{base + 1}"
        assert written["workspace_target"] == f"127.0.0.1:{base + 4}"
        listed = operations_list()
        assert listed.returncode == 0, listed.stderr
        assert json.loads(listed.stdout) == []
        assert product.stop() == 0
    assert not stack_file.exists()  # a stopped stack leaves no address behind

    env["OPS_OPERATIONS_TARGET"] = f"127.0.0.1:{base + 1}"  # where it was: now closed
    gone = operations_list()
    assert gone.returncode == 2
    assert gone.stdout == ""
    assert gone.stderr.splitlines() == [
        f"opsctl operations list: nothing answers at 127.0.0.1:{base + 1}"
        " (OPS_OPERATIONS_TARGET); start the stack with `opsctl up`, or point at another with"
        " --target HOST:PORT or OPS_OPERATIONS_TARGET."
    ]


def test_one_stack_per_directory_and_the_operators_writes_land_in_its_database(
    tmp_path: Path,
) -> None:
    env = product_env(OPS_DEV_MODEL_SECONDS="0")
    env.pop("OPS_DATABASE_URL", None)  # the operator's shell: nothing set
    stack_file = tmp_path / "var" / "stack.json"
    url = f"sqlite:///{tmp_path / 'up.sqlite3'}"
    with opsctl_up(url, env, cwd=tmp_path) as first:
        # `users set-plan` with no URL writes where the running stack reads, not the default.
        plan = _opsctl("users", "set-plan", "bob", "pro", env=env, cwd=tmp_path)
        assert plan.returncode == 0, plan.stderr
        with httpx.Client() as client:
            assert first.sign_in(client, user="bob").status_code == 200
            assert client.get(f"{first.url}api/settings/ai").json()["plan"] == "pro"
        assert not (tmp_path / "var" / "durable-ops.sqlite3").exists()

        # A second stack from the same directory, on ports of its own: refused at once.
        second = _up("--database-url", url, env=product_env(), cwd=tmp_path)
        assert second.returncode == 2, second.stdout + second.stderr
        [refusal] = [json.loads(line) for line in second.stdout.splitlines()]
        assert refusal["event"] == "already_running"
        assert refusal["pid"] == first.process.pid
        assert (
            f"another opsctl up (pid {first.process.pid}) runs from this directory"
            in (refusal["message"])
        )
        assert "Traceback" not in second.stderr
        # The first one's address file is still there, still its own.
        assert json.loads(stack_file.read_text())["pid"] == first.process.pid

        # From another directory, on the first one's ports: refused, and nothing made there.
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        fresh = {key: value for key, value in env.items() if key != "OPS_JWT_SECRET"}
        taken = _up(env=fresh, cwd=elsewhere)
        assert taken.returncode == 2
        assert json.loads(taken.stdout.splitlines()[0])["event"] == "address_in_use"
        assert list(elsewhere.iterdir()) == []  # no var/, no secrets.json
        assert first.stop() == 0
    assert not stack_file.exists()
    # Stopped, the directory is free again (the lock went with the process).
    with opsctl_up(url, env, cwd=tmp_path) as again:
        assert again.stop() == 0


def _opsctl(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "durable_ops.cli", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
