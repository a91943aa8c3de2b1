"""Two moves of the schema at once take turns (the migration lock), and ``opsctl migrate
--check`` says what is pending without changing anything. Real databases, real
``opsctl`` processes: two ``opsctl up`` or init containers starting together crashed
one on ``Duplicate entry '0001_operations'``."""

from __future__ import annotations

import contextlib
import secrets
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from durable_ops.cli import EXIT_DATABASE_UNAVAILABLE, EXIT_REFUSED, _exit_code
from durable_ops.storage import migrate
from durable_ops.storage.availability import DatabaseUnavailable, reaching
from tests.conftest import MakeDatabase, _admin
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
    for run, (_, err) in zip(runs, ended, strict=True):
        assert run.returncode == 0, err
        assert "Traceback" not in err
    # One moved the schema, and only its audit line says so; the others found it moved.
    assert sorted(out for out, _ in ended) == [
        f"schema at {head}\n",
        *[f"schema at {head} already: nothing applied\n"] * (TOGETHER - 1),
    ]
    audits = [line for _, err in ended for line in err.splitlines() if "schema_migrated" in line]
    assert len(audits) == 1, audits
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
    # The database it read, named as every opsctl line names one: no password.
    read = f"{make_url(fresh_url).render_as_string(hide_password=True)} (from OPS_DATABASE_URL)"
    empty = opsctl("migrate", "--check", env=env, cwd=tmp_path)
    assert empty.returncode == EXIT_REFUSED, empty.stderr
    said, count, first, *rest = empty.stdout.splitlines()
    assert said == f"{read}: schema at base (no tables); this release's head is {head}"
    assert count.endswith(" pending (`opsctl migrate` applies them):")
    assert first.startswith("  0001_operations  Operations: the user_operations table")
    assert rest[-1].startswith(f"  {head}  ")
    if fresh_url.startswith("sqlite"):
        assert not (tmp_path / "fresh.sqlite3").exists()  # not even made
    assert migrate.stamped_revision(fresh_url) is None

    migrate.upgrade(fresh_url, "0021_owner_open_work")
    behind = opsctl("migrate", "--check", env=env, cwd=tmp_path)
    assert behind.returncode == EXIT_REFUSED, behind.stderr
    pending = [line.split()[0] for line in behind.stdout.splitlines()[2:]]
    # Every revision after 0021, in order: 0022 up to head, by their numbers.
    assert [int(revision[:4]) for revision in pending] == list(range(22, int(head[:4]) + 1))
    assert pending[-1] == head
    assert migrate.stamped_revision(fresh_url) == "0021_owner_open_work"

    migrate.upgrade(fresh_url)
    current = opsctl("migrate", "--check", env=env, cwd=tmp_path)
    assert current.returncode == 0, current.stderr
    assert (
        current.stdout == f"{read}: schema at {head}; this release's head is {head}\nup to date\n"
    )
    assert current.stderr == ""  # changes nothing: no audit line


def test_migrate_check_names_the_database_it_read_never_its_password(
    make_mariadb_database: MakeDatabase, tmp_path: Path
) -> None:
    """A user with a password, as production's are (the tests' server may have none)."""
    created = make_mariadb_database()
    server = make_url(created)
    user, password = f"ops_check_{secrets.token_hex(4)}", secrets.token_hex(12)
    with contextlib.closing(_admin(created)) as admin, admin.cursor() as cursor:
        cursor.execute(f"CREATE USER '{user}'@'%' IDENTIFIED BY '{password}'")
        cursor.execute(f"GRANT SELECT ON {server.database}.* TO '{user}'@'%'")
    try:
        url = server.set(username=user, password=password)
        done = opsctl(
            "migrate",
            "--check",
            "--database-url",
            url.render_as_string(hide_password=False),
            cwd=tmp_path,
        )
    finally:
        with contextlib.closing(_admin(created)) as admin, admin.cursor() as cursor:
            cursor.execute(f"DROP USER '{user}'@'%'")
    assert done.returncode == EXIT_REFUSED, done.stdout + done.stderr
    assert done.stdout.splitlines()[0].startswith(
        f"{url.render_as_string(hide_password=True)} (from --database-url): schema at base"
    )
    assert password not in done.stdout + done.stderr


def test_migrate_check_takes_no_target(tmp_path: Path) -> None:
    both = opsctl("migrate", "--check", "--to", "base", cwd=tmp_path)
    assert both.returncode == 2
    assert both.stderr == ("opsctl migrate: argument --to: not allowed with argument --check\n")
