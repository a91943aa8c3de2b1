"""``var/stack.json``: where the running ``opsctl up`` serves, and how a command picks its
target (flag > variable > the file > default); nothing answering is one sentence, exit 2."""

from __future__ import annotations

import io
import os
import stat
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from durable_ops.cli import build_parser
from durable_ops.operator_cli import EXIT_UNREACHABLE, run
from durable_ops.settings import Settings
from durable_ops.stack import address_file
from durable_ops.stack.address_file import Target, choose_target
from tests.support.keys import keys_dir
from tests.support.ports import refusing_port


def _settings() -> Settings:
    return replace(
        Settings(),
        operations_target="127.0.0.1:9101",
        notifications_target="127.0.0.1:9102",
        ai_admission_target="127.0.0.1:9103",
        workspace_target="127.0.0.1:9104",
    )


def test_the_file_is_private_names_every_target_and_goes_when_its_stack_stops(
    tmp_path: Path,
) -> None:
    path = tmp_path / "var" / "stack.json"
    address_file.write(_settings(), "http://127.0.0.1:9100/", pid=os.getpid(), path=path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert list(path.parent.iterdir()) == [path]  # no draft left behind
    found = address_file.read(path)
    assert found is not None
    assert found["gateway_url"] == "http://127.0.0.1:9100/"
    assert [found[name] for name in ("operations_target", "workspace_target")] == [
        "127.0.0.1:9101",
        "127.0.0.1:9104",
    ]
    # What `opsctl ai status` reports as the stack's, whatever its caller's environment says.
    assert (found["ai_global_limit"], found["ai_user_limit"]) == (20, 2)
    address_file.remove(pid=os.getpid() + 1, path=path)  # not its file: left alone
    assert path.exists()
    address_file.remove(pid=os.getpid(), path=path)
    assert not path.exists()
    address_file.remove(pid=os.getpid(), path=path)  # already gone: fine


def test_a_file_left_by_a_killed_stack_is_ignored(tmp_path: Path) -> None:
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    path = tmp_path / "stack.json"
    address_file.write(_settings(), "http://127.0.0.1:9100/", pid=int(gone.stdout), path=path)
    assert address_file.read(path) is None
    assert choose_target("operations_target", None, {}, path).source == "the default"


def test_the_target_is_the_flag_else_the_variable_else_the_file_else_the_default(
    tmp_path: Path,
) -> None:
    path = tmp_path / "var" / "stack.json"
    variable = {"OPS_OPERATIONS_TARGET": "10.0.0.2:50051"}
    assert choose_target("operations_target", None, {}, path) == Target(
        "127.0.0.1:50051", "the default"
    )
    address_file.write(_settings(), "http://127.0.0.1:9100/", pid=os.getpid(), path=path)
    from_file = choose_target("operations_target", None, {}, path)
    assert from_file.address == "127.0.0.1:9101"
    assert str(path) in from_file.source
    assert choose_target("operations_target", None, variable, path) == Target(
        "10.0.0.2:50051", "OPS_OPERATIONS_TARGET"
    )
    assert choose_target("operations_target", "10.0.0.3:1", variable, path) == Target(
        "10.0.0.3:1", "--target"
    )
    assert choose_target("operations_target", None, {"OPS_OPERATIONS_TARGET": ""}, path) == (
        from_file
    )  # an empty variable is unset


@pytest.mark.parametrize("how", ["flag", "variable"])
def test_nothing_answering_is_one_sentence_naming_the_address_and_exit_2(
    how: str, capsys: pytest.CaptureFixture[str]
) -> None:
    address = f"127.0.0.1:{refusing_port()}"
    argv = ["operations", "list", *(["--target", address] if how == "flag" else [])]
    environ = {"OPS_OPERATIONS_TARGET": address} if how == "variable" else {}
    args = build_parser().parse_args(argv)
    code = run(args, replace(Settings(), service_keys_dir=str(keys_dir())), io.StringIO(), environ)
    assert code == EXIT_UNREACHABLE == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line == (
        f"opsctl operations list: nothing answers at {address}"
        f" ({'--target' if how == 'flag' else 'OPS_OPERATIONS_TARGET'}); start the stack with"
        " `opsctl up`, or point at another with --target HOST:PORT or OPS_OPERATIONS_TARGET."
    )
