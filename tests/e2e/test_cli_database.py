"""The commands that open the database themselves (``opsctl migrate``, ``users``,
``sessions revoke``, ``ai``, ``up``), as a user runs them: which database they use,
and one line with the README's exit code when they cannot use it. Real databases; real
subprocesses for each way a command ends (exit 2, 3 and 4, ``up`` and ``serve``), and
``cli.main`` in this process for the matrices of every command by every URL (``here``):
the same code from the parse on, without a second of interpreter start each."""

from __future__ import annotations

import functools
import secrets
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from durable_ops.storage.availability import SUPPORTED_URLS
from tests.e2e.test_cli import opsctl
from tests.support.opsctl import Completed, opsctl_in
from tests.support.ports import refusing_port

DIRECT_COMMANDS = [
    ["migrate"],
    ["users", "set-plan", "alice", "pro"],
    ["users", "set-budget", "alice", "5000"],
    ["users", "set-share", "alice", "2"],
    ["sessions", "revoke", "--user", "alice"],
    ["ai", "status"],
    ["ai", "enable"],
]


Opsctl = Callable[..., Completed]


@pytest.fixture
def here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Opsctl:
    return opsctl_in(tmp_path, monkeypatch, capsys)


def _one_line(result: subprocess.CompletedProcess[str], code: int) -> str:
    """The single line a refused command printed, after checking its exit code."""
    assert result.returncode == code, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize("command", DIRECT_COMMANDS, ids=" ".join)
def test_a_database_that_does_not_answer_is_one_line_and_exit_4(
    command: list[str], here: Opsctl
) -> None:
    url = f"mysql+pymysql://root@127.0.0.1:{refusing_port()}/x"
    line = _one_line(here(*command, "--database-url", url), 4)
    assert line.startswith(f"opsctl: the database {url} (from --database-url) did not answer: ")
    assert "Connection refused" in line


@pytest.mark.parametrize(
    ("command", "url"),
    [
        *((command, "bogus://x") for command in DIRECT_COMMANDS),
        (["users", "set-plan", "alice", "pro"], "not a url"),
        (["users", "set-plan", "alice", "pro"], "mysql+pymysql://root@h:port/x"),
    ],
)
def test_a_url_that_is_no_database_url_is_one_line_and_exit_2(
    command: list[str], url: str, tmp_path: Path, here: Opsctl
) -> None:
    line = _one_line(here(*command, env={"OPS_DATABASE_URL": url}), 2)
    assert line.startswith("opsctl: OPS_DATABASE_URL is not a database URL durable-ops can use (")
    assert line.endswith(f"): give {SUPPORTED_URLS}")
    assert not (tmp_path / "var").exists()  # the default SQLite file was not made instead


# SQLAlchemy knows each scheme; its driver is not installed (MySQLdb behind mysql:// and
# mariadb://), or the product's SQL was never written for it. Each gave a traceback, or a
# misleading "refused us" from a connection attempt.
UNSUPPORTED = [
    "mysql://u:secret@127.0.0.1:3306/db",
    "mariadb://u:secret@127.0.0.1:3306/db",
    "postgresql://u:secret@127.0.0.1:5432/db",
    "sqlite+aiosqlite:///x.sqlite3",
    "myslq+pymysql://u:secret@127.0.0.1:3306/db",
]


@pytest.mark.parametrize("url", UNSUPPORTED)
@pytest.mark.parametrize(
    "command", [["migrate"], ["migrate", "--check"], ["serve", "operations", "workspace"]]
)
def test_a_url_of_a_kind_the_product_cannot_use_is_refused_before_any_connection(
    command: list[str], url: str, tmp_path: Path, here: Opsctl
) -> None:
    from tests.support.product import product_env

    scheme = url.partition("://")[0]
    # Past the URL, ``serve`` would start servers: it runs as a user runs it.
    run = functools.partial(opsctl, cwd=tmp_path) if command[0] == "serve" else here
    done = run(*command, "--database-url", url, env=product_env())
    line = _one_line(done, 2) if command[0] != "serve" else done.stderr.splitlines()[-1]
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert line.endswith(
        f"--database-url is not a database URL durable-ops can use ({scheme}://):"
        f" give {SUPPORTED_URLS}"
    ), line
    assert "secret" not in done.stderr


# Each ended in a traceback (an SQLite URL with a host, an option PyMySQL does not take),
# or printed the password (an unescaped "@" or ":" in it, quoted by the parse error; one
# given as a query option, kept in the URL as printed).
MISTAKEN = [
    ("sqlite://relative.db", "a SQLite URL has three slashes and no host"),
    ("mysql+pymysql://u@127.0.0.1:1/db?bogus_opt=1", "options its driver does not know: bogus_opt"),
    ("mysql+pymysql://u:p@ss:secret@127.0.0.1:1/db", "it does not parse as a URL"),
]


@pytest.mark.parametrize(("url", "why"), MISTAKEN)
def test_a_mistaken_url_is_one_line_naming_the_mistake_never_its_password(
    url: str, why: str, here: Opsctl
) -> None:
    done = here("migrate", "--database-url", url)
    assert f"({why}" in _one_line(done, 2)
    assert "secret" not in done.stderr


def test_a_password_given_as_an_option_is_not_printed(tmp_path: Path) -> None:
    url = f"mysql+pymysql://root@127.0.0.1:{refusing_port()}/x?password=secret"
    line = _one_line(opsctl("migrate", "--database-url", url, cwd=tmp_path), 4)
    assert line.startswith(f"opsctl: the database {url.partition('?')[0]} (from --database-url)")
    assert "secret" not in line


def test_a_service_refused_by_its_database_names_it_and_where_its_url_came_from(
    mariadb_server_url: str, tmp_path: Path
) -> None:
    from tests.support.keys import key_env
    from tests.support.product import product_env

    server = make_url(mariadb_server_url)
    stranger = server.set(
        database="ops", username=f"nobody_{secrets.token_hex(4)}", password="wrong"
    )
    url = stranger.render_as_string(hide_password=False)
    env = product_env(OPS_DATABASE_URL=url, **key_env())  # its keys: not refused for their lack
    done = opsctl("serve", "workspace", env=env, cwd=tmp_path)
    assert done.returncode == 4, done.stderr
    shown = stranger.render_as_string(hide_password=True)
    last = done.stderr.splitlines()[-1]
    assert last.startswith(
        f"opsctl serve workspace: the database {shown} (from OPS_DATABASE_URL) refused us: "
    ), last
    assert "Access denied" in last
    assert "wrong" not in done.stderr


@pytest.mark.parametrize("command", [c for c in DIRECT_COMMANDS if c != ["migrate"]], ids=" ".join)
def test_a_schema_behind_the_code_is_one_line_naming_migrate_and_exit_3(
    command: list[str], tmp_path: Path, here: Opsctl
) -> None:
    url = f"sqlite:///{tmp_path / 'empty.sqlite3'}"
    line = _one_line(here(*command, env={"OPS_DATABASE_URL": url}), 3)
    assert line.startswith(f"opsctl: the database {url} (from OPS_DATABASE_URL): database schema")
    assert line.endswith("run `opsctl migrate` first")


def test_migrate_leaves_a_newer_releases_schema_and_refuses_to_move_it_in_one_line(
    tmp_path: Path,
) -> None:
    """The older release's application rollback (docs/operations.md) runs its migrate
    step on the newer schema: it ended in a traceback, exit 1, and Compose started nothing."""
    url = f"sqlite:///{tmp_path / 'ops.sqlite3'}"
    env = {"OPS_DATABASE_URL": url}
    assert opsctl("migrate", env=env, cwd=tmp_path).returncode == 0
    with sqlite3.connect(tmp_path / "ops.sqlite3") as connection:
        connection.execute("UPDATE alembic_version SET version_num = '0099_future'")
    kept = opsctl("migrate", env=env, cwd=tmp_path)
    assert kept.returncode == 0, kept.stdout + kept.stderr
    assert "schema at 0099_future" in kept.stdout
    line = _one_line(opsctl("migrate", "--to", "0002_notifications", env=env, cwd=tmp_path), 3)
    assert "0099_future, which a newer release wrote" in line
    assert line.endswith("move it to 0002_notifications with that release's `opsctl migrate --to`")


@pytest.mark.parametrize(
    "command", [["migrate"], ["users", "set-plan", "alice", "pro"]], ids=" ".join
)
def test_an_unknown_database_or_a_wrong_password_is_refused_in_one_line_and_exit_4(
    command: list[str], mariadb_server_url: str, tmp_path: Path
) -> None:
    server = make_url(mariadb_server_url)
    unknown = server.set(database=f"ops_absent_{secrets.token_hex(4)}")
    stranger = unknown.set(username=f"nobody_{secrets.token_hex(4)}", password="wrong")
    for url, says in [(unknown, "Unknown database"), (stranger, "Access denied")]:
        raw = url.render_as_string(hide_password=False)
        line = _one_line(opsctl(*command, "--database-url", raw, cwd=tmp_path), 4)
        assert " (from --database-url) refused us: " in line, line
        assert says in line
        assert "wrong" not in line  # the password is not repeated


def test_up_with_a_database_it_cannot_use_says_so_in_one_line(tmp_path: Path) -> None:
    from tests.support.product import product_env

    env = product_env()
    bad = opsctl("up", "--database-url", "bogus://x", env=env, cwd=tmp_path)
    assert _one_line(bad, 2).startswith("opsctl: --database-url is not a database URL")
    away = f"mysql+pymysql://root@127.0.0.1:{refusing_port()}/x"
    unreachable = opsctl("up", "--database-url", away, env=env, cwd=tmp_path)
    assert _one_line(unreachable, 4).startswith(
        f"opsctl: the database {away} (from --database-url)"
    )


def _clean_env(**chosen: str) -> dict[str, str]:
    """This process's environment without any database or stack of its own, plus ``chosen``."""
    import os

    return {k: v for k, v in os.environ.items() if k != "OPS_DATABASE_URL"} | chosen


def test_the_database_is_the_flag_else_the_variable_else_the_running_stacks(
    tmp_path: Path,
) -> None:
    import os
    import stat
    import sys
    from dataclasses import replace

    from durable_ops.settings import Settings
    from durable_ops.stack import address_file
    from durable_ops.storage import migrate

    urls = {name: f"sqlite:///{tmp_path / name}.sqlite3" for name in ("stack", "env", "flag")}
    for url in urls.values():
        migrate.upgrade(url)
    # What a running `opsctl up` records (this test's pid stands for it: alive).
    stack_file = tmp_path / "var" / "stack.json"
    running = replace(Settings(), database_url=urls["stack"])
    address_file.write(running, "http://127.0.0.1:9/", pid=os.getpid(), path=stack_file)
    assert stat.S_IMODE(stack_file.stat().st_mode) == 0o600  # the URL may hold a password

    def set_plan(user: str, *flag: str, **env: str) -> None:
        done = subprocess.run(
            [sys.executable, "-m", "durable_ops.cli", "users", "set-plan", user, "pro", *flag],
            env=_clean_env(**env),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr

    set_plan("to-stack")
    set_plan("to-env", OPS_DATABASE_URL=urls["env"])
    set_plan("to-flag", "--database-url", urls["flag"], OPS_DATABASE_URL=urls["env"])
    assert {name: _pro_users(url) for name, url in urls.items()} == {
        "stack": ["to-stack"],
        "env": ["to-env"],
        "flag": ["to-flag"],
    }
    assert not (tmp_path / "var" / "durable-ops.sqlite3").exists()  # never the default file


def _pro_users(url: str) -> list[str]:
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(text("SELECT owner_user_id FROM user_ai_settings"))
            return sorted(row[0] for row in rows)
    finally:
        engine.dispose()
