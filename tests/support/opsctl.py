"""``opsctl`` run in the test's own process (``cli.main``): its exit code, what it printed,
and, against running services, their log lines while it ran (the operator's audit trail)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, MutableMapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from durable_ops import cli
from durable_ops.model.scope import Role
from tests.support.grpc_services import Services
from tests.support.keys import key_env

Logs = list[MutableMapping[str, Any]]
Opsctl = Callable[..., tuple[int, str, str, Logs]]
Completed = subprocess.CompletedProcess[str]


def run_cli(args: Sequence[str], capsys: pytest.CaptureFixture[str]) -> Completed:
    """``cli.main(args)``: what ``opsctl ARGS`` would have exited with and printed."""
    capsys.readouterr()
    try:
        code = cli.main(list(args))
    except SystemExit as exited:  # argparse's own refusals, and --help
        code = int(exited.code or 0)
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["opsctl", *args], code, out, err)


def opsctl_in(
    cwd: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., Completed]:
    """``run(*args, env=...)``: ``opsctl ARGS`` run from ``cwd`` with ``env`` added to this
    process's environment, as ``run_cli``; undone when the test ends."""
    monkeypatch.chdir(cwd)

    def run(*args: str, env: dict[str, str] | None = None) -> Completed:
        for name, value in (env or {}).items():
            monkeypatch.setenv(name, value)
        return run_cli(args, capsys)

    return run


def in_process_opsctl(
    services: Services,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    *,
    before: Sequence[str] = (),
    after: Sequence[str] = (),
) -> Opsctl:
    """``opsctl *before ARGS… *after`` with the operator's key, at ``services``."""
    for name, value in key_env(Role.OPERATOR).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("OPS_OPERATIONS_TARGET", services.target)

    def run(*args: str) -> tuple[int, str, str, Logs]:
        with capture_logs() as logs:
            done = run_cli([*before, *args, *after], capsys)
        return done.returncode, done.stdout, done.stderr, logs

    return run
