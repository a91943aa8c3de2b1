"""Private files (issue 35, point 6): var/ 0700 and the SQLite files 0600, whoever makes them.

SQLite only: a MariaDB database keeps no file of ours. Subprocesses run with
umask 022, under which SQLite alone would make the database and its -wal and
-shm files 0644, so these tests fail without the preparation.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from durable_ops.storage import migrate
from durable_ops.storage.db import Database
from tests.support.keys import key_env

DEFAULT_DATABASE = Path("var") / "durable-ops.sqlite3"


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _opsctl(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``opsctl`` as a new user runs it in a fresh directory: no OPS_* set, umask 022."""
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("OPS_")}
    return subprocess.run(
        [sys.executable, "-m", "durable_ops.cli", *args],
        env={**inherited, **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        umask=0o022,
    )


def test_a_fresh_migrate_leaves_var_and_every_sqlite_file_private(tmp_path: Path) -> None:
    migrated = _opsctl(tmp_path, "migrate")
    assert migrated.returncode == 0, migrated.stderr
    database = tmp_path / DEFAULT_DATABASE
    assert _mode(database.parent) == 0o700
    assert _mode(database) == 0o600
    db = Database(f"sqlite:///{database}", pool_size=1)
    try:
        with db.engine.begin() as connection:  # a write: SQLite makes the -wal and -shm now
            connection.exec_driver_sql("UPDATE ai_admission_control SET ai_enabled = 0")
        companions = [Path(f"{database}{suffix}") for suffix in ("-wal", "-shm")]
        assert {path.name: _mode(path) for path in companions} == {
            "durable-ops.sqlite3-wal": 0o600,
            "durable-ops.sqlite3-shm": 0o600,
        }
    finally:
        db.dispose()


def test_a_service_starting_first_makes_the_same_private_files(tmp_path: Path) -> None:
    # Refused (exit 3: nothing migrated), but only after opening, so creating, the database.
    keys = key_env()  # kept elsewhere: a service that trusts no key would not start
    served = _opsctl(tmp_path, "serve", "operations", OPS_OPERATIONS_BIND="127.0.0.1:0", **keys)
    assert served.returncode == 3, served.stderr
    assert _mode(tmp_path / "var") == 0o700
    assert _mode(tmp_path / DEFAULT_DATABASE) == 0o600


def test_an_existing_database_readable_by_others_is_tightened(tmp_path: Path) -> None:
    database = tmp_path / "old.sqlite3"
    earlier = sqlite3.connect(database)  # as an earlier release left it, still open: -wal, -shm
    try:
        earlier.execute("PRAGMA journal_mode=WAL")
        earlier.execute("CREATE TABLE kept (x)")
        earlier.commit()
        files = [database, Path(f"{database}-wal"), Path(f"{database}-shm")]
        for path in files:
            path.chmod(0o644)
        migrate.upgrade(f"sqlite:///{database}")
        assert [_mode(path) for path in files] == [0o600] * 3
        assert earlier.execute("SELECT count(*) FROM kept").fetchone() == (0,)  # data untouched
    finally:
        earlier.close()


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:"])
def test_an_in_memory_database_makes_no_file(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    db = Database(url, pool_size=1)
    try:
        with db.engine.connect() as connection:
            assert connection.exec_driver_sql("SELECT 1").scalar() == 1
    finally:
        db.dispose()
    assert list(tmp_path.iterdir()) == []


def test_a_secrets_file_others_may_read_is_refused_with_a_sentence(tmp_path: Path) -> None:
    made = _opsctl(tmp_path, "token", "--user", "alice")
    assert made.returncode == 0, made.stderr
    kept = tmp_path / "var" / "secrets.json"
    kept.chmod(0o666)
    refused = _opsctl(tmp_path, "token", "--user", "alice")
    assert refused.returncode == 2
    assert refused.stdout == ""
    assert refused.stderr.strip().splitlines() == [
        "opsctl: var/secrets.json has mode 0666, so other local users may read or change it:"
        " run `chmod 600 var/secrets.json` (and rotate what it holds if they may have)"
    ]
    kept.chmod(0o600)
    assert _opsctl(tmp_path, "token", "--user", "alice").returncode == 0
