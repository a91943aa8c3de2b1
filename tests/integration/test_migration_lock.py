"""Two moves of the schema at once take turns (the migration lock), and ``opsctl migrate
--check`` says what is pending without changing anything. Real databases, real
``opsctl`` processes: two ``opsctl up`` or init containers starting together crashed
one on ``Duplicate entry '0001_operations'``."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from durable_ops.cli import EXIT_DATABASE_UNAVAILABLE, EXIT_REFUSED, _exit_code
from durable_ops.storage import migrate
from durable_ops.storage.availability import DatabaseUnavailable, reaching
from tests.e2e.test_cli import opsctl

TOGETHER = 3  # the more at once, the surer two race without the lock


def test_migrations_at_once_on_a_fresh_database_take_turns(fresh_url: str, tmp_path: Path) -> None:
    runs = [
        subprocess.Popen(
            [sys.executable, "-m", "durable_ops.cli", "migrate", "--database-url", fresh_url],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(TOGETHER)
    ]
    ended = [run.communicate(timeout=120) for run in runs]
    head = migrate.head_revision()
    for run, (out, err) in zip(runs, ended, strict=True):
        assert run.returncode == 0, err
        assert "Traceback" not in err
        assert out == f"schema at {head}\n"
    assert migrate.stamped_revision(fresh_url) == head


def test_a_migration_waits_for_the_lock_no_longer_than_its_bound(
    fresh_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(migrate, "MIGRATION_LOCK_WAIT_SECONDS", 0.5)
    refused: list[BaseException] = []

    def second() -> None:  # a thread of its own: a lock the caller holds is not taken again
        try:
            with reaching(fresh_url, "--database-url"):
                migrate.upgrade(fresh_url)
        except BaseException as error:
            refused.append(error)

    with migrate.migration_lock(fresh_url):
        started = time.monotonic()
        waiter = threading.Thread(target=second)
        waiter.start()
        waiter.join(30)
        waited = time.monotonic() - started
    assert waited >= 0.5
    [error] = refused
    assert isinstance(error, DatabaseUnavailable)
    assert str(error).endswith(
        "(from --database-url) is busy: another migration has held its migration lock for"
        " 0.5 s; try again once it ends"
    )
    assert _exit_code(error) == EXIT_DATABASE_UNAVAILABLE
    assert migrate.stamped_revision(fresh_url) is None  # it did nothing
    migrate.upgrade(fresh_url)  # the lock was given back
    assert migrate.stamped_revision(fresh_url) == migrate.head_revision()


def test_migrate_check_names_what_is_pending_and_changes_nothing(
    fresh_url: str, tmp_path: Path
) -> None:
    head = migrate.head_revision()
    env = {"OPS_DATABASE_URL": fresh_url}
    empty = opsctl("migrate", "--check", env=env, cwd=tmp_path)
    assert empty.returncode == EXIT_REFUSED, empty.stderr
    said, count, first, *rest = empty.stdout.splitlines()
    assert said == f"schema at base (no tables); this release's head is {head}"
    assert count.endswith(" pending (`opsctl migrate` applies them):")
    assert first.startswith("  0001_operations  Operations: the user_operations table")
    assert rest[-1].startswith(f"  {head}  ")
    if fresh_url.startswith("sqlite"):
        assert not (tmp_path / "fresh.sqlite3").exists()  # not even made
    assert migrate.stamped_revision(fresh_url) is None

    migrate.upgrade(fresh_url, "0021_owner_open_work")
    behind = opsctl("migrate", "--check", env=env, cwd=tmp_path)
    assert behind.returncode == EXIT_REFUSED, behind.stderr
    assert [line.split()[0] for line in behind.stdout.splitlines()[2:]] == [
        "0022_owner_state_held",
        head,
    ]
    assert migrate.stamped_revision(fresh_url) == "0021_owner_open_work"

    migrate.upgrade(fresh_url)
    current = opsctl("migrate", "--check", env=env, cwd=tmp_path)
    assert current.returncode == 0, current.stderr
    assert current.stdout == f"schema at {head}; this release's head is {head}\nup to date\n"
    assert current.stderr == ""  # changes nothing: no audit line


def test_migrate_check_takes_no_target(tmp_path: Path) -> None:
    both = opsctl("migrate", "--check", "--to", "base", cwd=tmp_path)
    assert both.returncode == 2
    assert both.stderr == ("opsctl migrate: argument --to: not allowed with argument --check\n")
