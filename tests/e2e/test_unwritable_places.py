"""A directory the product cannot write (read-only, missing, refused) is a bad setting:
one line naming the path and the setting, exit 2, no traceback. Real ``opsctl``
processes on a real read-only file system (a remounted tmpfs: a mode stops no root)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from durable_ops.hoststore import acquire
from tests.e2e.test_cli import opsctl
from tests.support import disks
from tests.support.product import product_env


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    """The last line (``opsctl up`` says its own on stdout), after checking exit 2."""
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    return (done.stderr or done.stdout).strip().splitlines()[-1]


def test_keys_in_a_read_only_folder_are_one_line_naming_it_and_exit_2(tmp_path: Path) -> None:
    with disks.small_disk(tmp_path / "disk", size="1m") as disk:
        made = {"OPS_SERVICE_KEYS_DIR": str(disk / "keys")}
        assert opsctl("keys", "init", "operator", env=made, cwd=tmp_path).returncode == 0
        disks.make_read_only(disk)
        fresh = {"OPS_SERVICE_KEYS_DIR": str(disk / "fresh")}
        for env, command in [
            (fresh, ["keys", "init"]),
            (made, ["keys", "issue", "reports"]),
            (made, ["keys", "rotate", "operator"]),
        ]:
            line = _one_line(opsctl(*command, env=env, cwd=tmp_path))
            assert line.startswith(f"opsctl: cannot write {disk}/"), line
            assert line.endswith(": Read-only file system; check OPS_SERVICE_KEYS_DIR"), line


def test_up_in_a_read_only_directory_or_keys_folder_is_a_bad_setting(tmp_path: Path) -> None:
    env = product_env(OPS_DEV_MODEL_SECONDS="0", OPS_LOG_JSON="false")
    database = f"sqlite:///{tmp_path / 'up.sqlite3'}"
    with disks.small_disk(tmp_path / "disk", size="1m") as disk:
        disks.make_read_only(disk)
        in_it = opsctl("up", "--database-url", database, env=env, cwd=disk)
        assert _one_line(in_it) == (
            "opsctl up: cannot write var: Read-only file system; check the directory"
            " opsctl up runs in (it keeps var/)"
        )
        keys = env | {"OPS_SERVICE_KEYS_DIR": str(disk / "keys")}
        (tmp_path / "here").mkdir()
        with_keys = opsctl("up", "--database-url", database, env=keys, cwd=tmp_path / "here")
        assert _one_line(with_keys) == (
            f"opsctl up: cannot write {disk / 'keys'}: Read-only file system;"
            " check OPS_SERVICE_KEYS_DIR"
        )


@pytest.mark.parametrize(
    ("made", "says"), [(None, "does not exist"), (0o755, "has mode 0755; it must be 0700")]
)
def test_a_host_store_folder_the_store_refuses_is_a_bad_setting(
    made: int | None, says: str, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    if made is not None:
        store.mkdir(mode=made)
        store.chmod(made)
    env = product_env(OPS_WORKERS_AI_OPERATIONS_ENABLED="true", OPS_HOST_STORE_DIR=str(store))
    line = _one_line(opsctl("serve", "ai-worker", env=env, cwd=tmp_path))
    assert line == (
        f"opsctl serve ai-worker: OPS_HOST_STORE_DIR cannot hold the host store: {store} {says}"
    )


@pytest.mark.parametrize("initialized", [False, True], ids=["fresh", "initialized"])
def test_a_host_store_on_a_read_only_file_system_is_a_bad_setting(
    initialized: bool, tmp_path: Path
) -> None:
    """It ended in exit 1, pointing at 'A damaged store' of docs/operations.md."""
    with disks.small_disk(tmp_path / "disk", size="1m") as disk:
        store = disk / "store"
        store.mkdir(mode=0o700)
        store.chmod(0o700)
        if initialized:
            acquire(store, "runner-1").close()
        disks.make_read_only(disk)
        env = product_env(OPS_WORKERS_AI_OPERATIONS_ENABLED="true", OPS_HOST_STORE_DIR=str(store))
        line = _one_line(opsctl("serve", "ai-worker", env=env, cwd=tmp_path))
    assert line == (
        "opsctl serve ai-worker: OPS_HOST_STORE_DIR cannot hold the host store:"
        f" cannot write {store}/host.lock: Read-only file system"
    )
