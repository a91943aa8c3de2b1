"""opsctl as a user runs it: real subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from durable_ops.cli import GRPC_SERVICES, build_parser
from durable_ops.settings import service_variable
from durable_ops.storage.migrate import MIGRATIONS, head_revision, stamped_revision
from tests.conftest import MigratedSqlite
from tests.support.keys import key_env
from tests.support.opsctl import run_cli


def opsctl(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "durable_ops.cli", *args],
        env={**os.environ, **(env or {})},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("service", sorted(GRPC_SERVICES))
def test_a_service_refuses_an_unmigrated_database(service: str, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'empty.sqlite3'}"
    # A port of its own: the default one may be another test's running service.
    bind = {service_variable(service, "bind"): "127.0.0.1:0"}
    result = opsctl("serve", service, "--database-url", url, env=bind | key_env(), cwd=tmp_path)
    assert result.returncode == 3, result.stderr
    assert "opsctl migrate" in result.stderr


def test_migrate_set_plan_switch_and_down(tmp_path: Path) -> None:
    env = {"OPS_DATABASE_URL": f"sqlite:///{tmp_path / 'ops.sqlite3'}"}
    assert f"schema at {head_revision()}" in opsctl("migrate", env=env).stdout
    result = opsctl("users", "set-plan", "alice", "pro", env=env)
    assert result.stdout.strip() == "alice: plan pro, ai_enabled false"
    assert opsctl("ai", "disable", env=env).stdout.startswith("AI globally disabled\n")
    assert opsctl("ai", "status", env=env).stdout.startswith("AI globally disabled\n")
    # Dropping every table asks first: the plan, and exit 6 with nothing dropped.
    unconfirmed = opsctl("migrate", "--to", "base", env=env)
    assert unconfirmed.returncode == 6, unconfirmed.stderr
    assert unconfirmed.stdout.startswith(f"would drop every table of {env['OPS_DATABASE_URL']}")
    assert "not confirmed; add --yes" in unconfirmed.stderr
    assert opsctl("ai", "status", env=env).returncode == 0  # still there
    dropped = opsctl("migrate", "--to", "base", "--yes", env=env)
    assert dropped.returncode == 0, dropped.stderr
    assert dropped.stdout.strip() == "schema at base (no tables)"
    [audit] = [json.loads(line) for line in dropped.stderr.splitlines()]
    assert audit["event"] == "schema_migrated"
    assert (audit["from_revision"], audit["to_revision"]) == (head_revision(), None)
    assert audit["operator"]
    refused = opsctl("users", "set-plan", "alice", "pro", env=env)
    assert refused.returncode != 0
    assert "opsctl migrate" in refused.stderr


def test_every_move_down_asks_first_naming_the_revisions_it_undoes(
    tmp_path: Path, migrated_sqlite: MigratedSqlite
) -> None:
    """Not only ``--to base``: a move to an older revision drops tables and columns too."""
    url = migrated_sqlite(tmp_path / "ops.sqlite3")
    env = {"OPS_DATABASE_URL": url}
    newest_first = sorted(path.stem for path in (MIGRATIONS / "versions").glob("0*.py"))[::-1]

    unconfirmed = opsctl("migrate", "--to", "0002_notifications", env=env)
    assert unconfirmed.returncode == 6, unconfirmed.stderr
    said, *undone = unconfirmed.stdout.splitlines()
    assert said.startswith(
        f"would move {url} (from OPS_DATABASE_URL) down from {head_revision()} to"
        " 0002_notifications, dropping what these added"
    )
    assert [line.split()[0] for line in undone] == newest_first[:-2]
    assert undone[-1] == (
        "  0003_workspace_ai  Workspace and AI: jobs, attachments, AI settings, workspace notes,"
        " admission control."
    )
    assert unconfirmed.stderr.strip() == (
        "opsctl migrate --to 0002_notifications: not confirmed; add --yes"
    )
    assert stamped_revision(url) == head_revision()  # nothing undone

    dropped = opsctl("migrate", "--to", "0002_notifications", "--yes", env=env)
    assert (dropped.returncode, dropped.stdout) == (0, "schema at 0002_notifications\n")
    raised = opsctl("migrate", "--to", "0003_workspace_ai", env=env)  # a move up asks nothing
    assert (raised.returncode, raised.stdout) == (0, "schema at 0003_workspace_ai\n")


def test_set_budget_answers_on_stdout_and_logs_who_ran_it(
    tmp_path: Path, migrated_sqlite: MigratedSqlite
) -> None:
    env = {"OPS_DATABASE_URL": migrated_sqlite(tmp_path / "ops.sqlite3")}
    opsctl("users", "set-plan", "alice", "pro", env=env)
    result = opsctl("users", "set-budget", "alice", "250000", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("alice: daily token budget 250,000 (set by ")
    [audit] = [json.loads(line) for line in result.stderr.splitlines()]
    assert (audit["event"], audit["daily_tokens"]) == ("token_budget_set", 250000)
    assert audit["operator"]
    back = opsctl("users", "set-budget", "alice", "default", env=env)
    assert "daily token budget 100,000 (the plan's default)" in back.stdout


def test_bad_input_is_a_clear_error_not_a_traceback(
    tmp_path: Path, migrated_sqlite: MigratedSqlite
) -> None:
    env = {"OPS_DATABASE_URL": migrated_sqlite(tmp_path / "ops.sqlite3")}
    bad_user = opsctl("users", "set-plan", "not a user!", "pro", env=env)
    assert bad_user.returncode == 2
    assert "owner" in bad_user.stderr
    assert "Traceback" not in bad_user.stderr
    bad_setting = opsctl("ai", "status", env={**env, "OPS_AI_USER_LIMIT": "many"})
    assert bad_setting.returncode == 2
    assert "OPS_AI_USER_LIMIT" in bad_setting.stderr


def test_a_reader_that_leaves_early_is_no_error() -> None:
    """``opsctl operations list | head``: the pipe closes before opsctl is done writing."""
    reader_gone = subprocess.Popen(
        [sys.executable, "-m", "durable_ops.cli", "token", "--user", "alice"],
        env={**os.environ, "OPS_JWT_SECRET": "s" * 32},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert reader_gone.stdout is not None
    reader_gone.stdout.close()  # long before it prints: its imports take a while
    errors = reader_gone.communicate(timeout=60)[1]
    assert reader_gone.returncode == 0, errors
    assert "BrokenPipeError" not in errors


def test_token_prints_a_jwt_for_the_user() -> None:
    import jwt

    token = opsctl("token", "--user", "alice", "--ttl", "60", env={"OPS_JWT_SECRET": "s" * 32})
    claims = jwt.decode(token.stdout.strip(), "s" * 32, algorithms=["HS256"])
    assert claims["sub"] == "alice"
    assert claims["exp"] - claims["iat"] == 60


def test_every_command_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    """In this process: a start of opsctl each would cost a second of CPU for nothing the
    parser does not show here (the help of a few, as a user runs it, is the next test)."""
    import argparse

    (commands,) = (
        action.choices
        for action in build_parser()._actions
        if isinstance(action, argparse._SubParsersAction)
    )
    for name in commands:
        result = run_cli([name, "--help"], capsys)
        assert result.returncode == 0, name
        assert "usage: opsctl" in result.stdout


@pytest.mark.parametrize(
    ("command", "says"),
    [
        (["token"], ["Print a user JWT", "var/secrets.json", "lifetime (default: 3600)"]),
        (["serve"], ["Run one process", "gateway        the HTTP API", "default 127.0.0.1:8080"]),
        (["ai"], ["Switch AI admission", "OPS_AI_GLOBAL_LIMIT, default 20", "--json"]),
        (["up"], ["restarted with backoff", "--port-base N", "(default: demo)"]),
        (
            ["console", "revoke"],
            [
                "by default your own (the name --as gives",
                "--operator NAME's",
                "with --all, of every",
            ],
        ),
    ],
)
def test_help_says_what_a_command_does_and_its_defaults(
    command: list[str], says: list[str]
) -> None:
    shown = " ".join(opsctl(*command, "--help").stdout.split())  # argparse wraps lines
    for text in says:
        assert " ".join(text.split()) in shown, (command, text)


def test_ai_status_shows_the_switch_the_active_operations_and_the_limits(
    tmp_path: Path, migrated_sqlite: MigratedSqlite
) -> None:
    env = {"OPS_DATABASE_URL": migrated_sqlite(tmp_path / "ops.sqlite3"), "OPS_AI_USER_LIMIT": "3"}
    # No stack runs on this database: the limits are this environment's, and it says so.
    assert opsctl("ai", "status", env=env, cwd=tmp_path).stdout.splitlines() == [
        "AI globally enabled",
        "0 AI operations active; limits as set in this environment (not read from the AI"
        " Admission service): 20 in total (OPS_AI_GLOBAL_LIMIT), 3 per user (OPS_AI_USER_LIMIT)",
    ]


def test_ai_status_as_json(tmp_path: Path, migrated_sqlite: MigratedSqlite) -> None:
    env = {"OPS_DATABASE_URL": migrated_sqlite(tmp_path / "ops.sqlite3"), "OPS_AI_USER_LIMIT": "3"}
    assert json.loads(opsctl("ai", "disable", "--json", env=env).stdout)["ai_enabled"] is False
    status = json.loads(opsctl("ai", "status", "--json", env=env, cwd=tmp_path).stdout)
    assert status == {
        "ai_enabled": False,
        "active_operations": 0,
        "global_limit": 20,
        "user_limit": 3,
        "limits_from": "environment",
    }


def test_ai_status_shows_the_running_stacks_limits_not_the_callers(
    tmp_path: Path, migrated_sqlite: MigratedSqlite
) -> None:
    from dataclasses import replace

    from durable_ops.settings import Settings
    from durable_ops.stack import address_file

    url = migrated_sqlite(tmp_path / "ops.sqlite3")
    # What `opsctl up` records once its children run (this test's pid: a stack alive).
    stack = replace(Settings(), database_url=url, ai_user_limit=4)
    address_file.write(
        stack, "http://127.0.0.1:1/", pid=os.getpid(), path=tmp_path / "var/stack.json"
    )
    env = {"OPS_DATABASE_URL": url, "OPS_AI_USER_LIMIT": "7"}  # the caller's shell says 7
    assert opsctl("ai", "status", env=env, cwd=tmp_path).stdout.splitlines()[1] == (
        f"0 AI operations active; limits of the running stack (`opsctl up`, pid {os.getpid()}):"
        " 20 in total (OPS_AI_GLOBAL_LIMIT), 4 per user (OPS_AI_USER_LIMIT)"
    )
    status = json.loads(opsctl("ai", "status", "--json", env=env, cwd=tmp_path).stdout)
    assert (status["user_limit"], status["limits_from"]) == (4, "running_stack")
    # Another database is not that stack's: the environment's limits, said as such.
    other = {"OPS_DATABASE_URL": migrated_sqlite(tmp_path / "other.sqlite3")}
    status = json.loads(opsctl("ai", "status", "--json", env=env | other, cwd=tmp_path).stdout)
    assert (status["user_limit"], status["limits_from"]) == (7, "environment")


def test_an_unknown_revision_and_the_version_are_answered_plainly(tmp_path: Path) -> None:
    env = {"OPS_DATABASE_URL": f"sqlite:///{tmp_path / 'ops.sqlite3'}"}
    # --to head says the revision it reached, not "head".
    assert opsctl("migrate", "--to", "head", env=env).stdout.strip() == (
        f"schema at {head_revision()}"
    )
    unknown = opsctl("migrate", "--to", "nope", env=env)
    assert unknown.returncode == 2
    assert "no revision 'nope'; known: base, 0001_operations" in unknown.stderr
    assert "Traceback" not in unknown.stderr
    version = opsctl("--version")
    assert version.returncode == 0
    assert version.stdout.strip() == f"opsctl {metadata.version('durable-ops')}"


# What `opsctl up` refuses before any child starts, and the one line it says.
UP_REFUSES = [
    (
        {"OPS_LOG_LEVEL": "bogus"},
        "OPS_LOG_LEVEL must be debug, info, warning or error, not 'bogus'",
    ),
    # Each of these only the AI worker used to refuse: the stack started, and stopped
    # when the worker had exited 2 five times.
    ({"OPS_AI_CIRCUIT_FAILURES": "0"}, "OPS_AI_CIRCUIT_FAILURES must be at least 1, not 0"),
    (
        {"OPS_WORKER_CONCURRENCY": "99"},
        "OPS_WORKER_CONCURRENCY must be between 0 and 64, not 99",
    ),
    (
        {"OPS_WORKER_LEASE_SECONDS": "0"},
        "OPS_WORKER_LEASE_SECONDS must be between 5 and 600, not 0",
    ),
    (
        {"OPS_AI_EXTERNAL_URL": "https://models.example/v1"},
        "OPS_AI_EXTERNAL_MODEL must be 1 to 128 characters when OPS_AI_EXTERNAL_URL is set, not ''",
    ),
    # The worker's metrics server refused it; tracing, every child.
    (
        {"OPS_WORKER_METRICS_BIND": ":9100"},
        "OPS_WORKER_METRICS_BIND must be HOST:PORT with a port 1-65535 (0.0.0.0:PORT for"
        " every interface), not ':9100'",
    ),
    (
        {"OTEL_TRACES_EXPORTER": "jaeger"},
        "OTEL_TRACES_EXPORTER must be otlp, console or none, not jaeger",
    ),
    # Accepted, and every analysis was refused.
    ({"OPS_AI_USER_LIMIT": "-1"}, "OPS_AI_USER_LIMIT must be at least 1, not -1"),
    # Both refused once var/up.lock was made, which stayed.
    (
        {"OPS_DATABASE_URL": "sqlite://host/ops.sqlite3"},
        "OPS_DATABASE_URL is not a database URL durable-ops can use (a SQLite URL has three"
        " slashes and no host: sqlite:///PATH): give sqlite:///PATH,"
        " mysql+pymysql://USER:PASSWORD@HOST:PORT/DATABASE or mariadb+pymysql://…",
    ),
    (
        {"OPS_JWT_SECRET": "short"},
        "OPS_JWT_SECRET holds a secret of 5 bytes; HS256 needs at least 32 (RFC 7518 §3.2):"
        " set a random one (`openssl rand -base64 32`), or leave it unset for the one"
        " `opsctl` keeps in var/secrets.json",
    ),
]


@pytest.mark.parametrize(
    ("env", "said"), UP_REFUSES, ids=[next(iter(env)) for env, _said in UP_REFUSES]
)
def test_up_refuses_a_setting_a_child_would_refuse_before_anything_starts(
    env: dict[str, str], said: str, tmp_path: Path
) -> None:
    refused = opsctl("up", env=env, cwd=tmp_path)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert refused.stderr.strip() == f"opsctl: {said}"
    assert list(tmp_path.iterdir()) == []  # no child started, nothing kept


@pytest.mark.parametrize(
    ("target", "setting"),
    [
        ("operations", "OPS_OPERATIONS_BIND"),
        ("gateway", "OPS_GATEWAY_BIND"),
        ("gateway", "OPS_GATEWAY_METRICS_BIND"),
        ("dev-model", "OPS_DEV_MODEL_BIND"),
    ],
)
def test_serve_on_a_taken_address_names_it_and_its_setting_and_exits_2(
    target: str, setting: str, tmp_path: Path, migrated_sqlite: MigratedSqlite
) -> None:
    import socket

    from tests.support.ports import free_port

    env = {"OPS_DATABASE_URL": migrated_sqlite(tmp_path / "ops.sqlite3")}
    # Its own addresses free, but for the one something else listens on.
    env |= {service_variable(target, "bind"): f"127.0.0.1:{free_port()}"}
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = f"127.0.0.1:{squatter.getsockname()[1]}"
        refused = opsctl("serve", target, env={**env, setting: taken}, cwd=tmp_path)
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.splitlines() == [
        f"opsctl serve {target}: {taken} is already in use ({setting}); stop what listens"
        f" there or set {setting} to another address"
    ]
    assert not (tmp_path / "var").exists()  # refused before the gateway kept a secret


def test_serve_gateway_names_the_metrics_variable_it_refuses(tmp_path: Path) -> None:
    from tests.support.ports import free_port

    env = {
        **key_env(),
        "OPS_GATEWAY_BIND": f"127.0.0.1:{free_port()}",
        "OPS_GATEWAY_METRICS_BIND": ":9464",  # no host: the metrics server refuses it
    }
    refused = opsctl("serve", "gateway", env=env, cwd=tmp_path)
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.splitlines()[-1] == (
        "opsctl serve gateway: OPS_GATEWAY_METRICS_BIND must be host:port, not ':9464'"
    )


def test_every_change_an_operator_makes_is_an_audit_line_naming_them(
    tmp_path: Path, migrated_sqlite: MigratedSqlite
) -> None:
    import getpass

    env = {
        "OPS_DATABASE_URL": migrated_sqlite(tmp_path / "ops.sqlite3"),
        "OPS_SERVICE_KEYS_DIR": str(tmp_path / "keys"),
    }
    changes = {
        "plan_set": ["users", "set-plan", "alice", "pro"],
        "sessions_revoked": ["sessions", "revoke", "--user", "alice"],
        "ai_switched": ["ai", "disable"],
        "service_keys_made": ["keys", "init", "operator"],
        "service_key_issued": ["keys", "issue", "reports", "--role", "worker"],
        "service_key_rotated": ["keys", "rotate", "operator"],
    }
    for event, command in changes.items():
        done = opsctl(*command, env=env, cwd=tmp_path)
        assert done.returncode == 0, (command, done.stderr)
        # As every log line off a terminal (OPS_LOG_JSON auto): one JSON object.
        [line] = [json.loads(line) for line in done.stderr.splitlines()]
        assert line["event"] == event
        assert line["operator"] == getpass.getuser(), line
        assert line["level"] == "info"
        assert line["process"] == "opsctl"
        assert event not in done.stdout  # stdout stays the answer
    status = opsctl("ai", "status", env=env, cwd=tmp_path)
    assert status.stderr == ""  # reading changes nothing: no audit line


def test_a_migrate_that_applies_nothing_says_so_and_writes_no_audit_line(tmp_path: Path) -> None:
    """An audit line records a change (``schema_migrated``, from and to); a run that found
    the schema where it was asked to be says so, and is none."""
    env = {"OPS_DATABASE_URL": f"sqlite:///{tmp_path / 'ops.sqlite3'}"}
    head = head_revision()
    first = opsctl("migrate", env=env, cwd=tmp_path)
    assert first.stdout == f"schema at {head}\n", first.stderr
    [audit] = [json.loads(line) for line in first.stderr.splitlines()]
    assert (audit["event"], audit["from_revision"], audit["to_revision"]) == (
        "schema_migrated",
        None,
        head,
    )
    for again in (["migrate"], ["migrate", "--to", "head"], ["migrate", "--to", head]):
        done = opsctl(*again, env=env, cwd=tmp_path)
        assert (done.returncode, done.stdout, done.stderr) == (
            0,
            f"schema at {head} already: nothing applied\n",
            "",
        )
    dropped = opsctl("migrate", "--to", "base", "--yes", env=env, cwd=tmp_path)
    [audit] = [json.loads(line) for line in dropped.stderr.splitlines()]
    assert (audit["from_revision"], audit["to_revision"]) == (head, None)
    empty = opsctl("migrate", "--to", "base", "--yes", env=env, cwd=tmp_path)
    assert (empty.returncode, empty.stdout, empty.stderr) == (
        0,
        "schema at base (no tables) already: nothing applied\n",
        "",
    )


@pytest.mark.parametrize(
    ("log_json", "as_json"), [("auto", True), ("true", True), ("false", False)]
)
def test_audit_lines_follow_ops_log_json(log_json: str, as_json: bool, tmp_path: Path) -> None:
    env = {"OPS_SERVICE_KEYS_DIR": str(tmp_path / "keys"), "OPS_LOG_JSON": log_json}
    done = opsctl("keys", "init", "operator", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("{") == as_json, line
    assert "service_keys_made" in line


def test_a_setting_the_command_does_not_read_does_not_fail_it_after_its_change(
    tmp_path: Path, migrated_sqlite: MigratedSqlite
) -> None:
    """The audit line reads the log settings after the change is made: a bad setting
    elsewhere must not turn a done change into an exit 2 the operator would retry."""
    env = {"OPS_DATABASE_URL": migrated_sqlite(tmp_path / "ops.sqlite3")}
    done = opsctl("users", "set-plan", "alice", "pro", env=env | {"OPS_WORKER_LEASE_SECONDS": "x"})
    assert done.returncode == 0, done.stderr
    [line] = [json.loads(line) for line in done.stderr.splitlines()]
    assert (line["event"], line["plan"]) == ("plan_set", "pro")
