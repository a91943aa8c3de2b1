"""``opsctl`` run in the test's own process against running services: its exit code, what
it printed, and the services' log lines while it ran (the operator's audit trail)."""

from __future__ import annotations

from collections.abc import Callable, MutableMapping, Sequence
from typing import Any

import pytest
from structlog.testing import capture_logs

from durable_ops import cli
from durable_ops.model.scope import Role
from tests.support.grpc_services import Services
from tests.support.keys import key_env

Logs = list[MutableMapping[str, Any]]
Opsctl = Callable[..., tuple[int, str, str, Logs]]


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
        capsys.readouterr()
        with capture_logs() as logs:
            try:
                code = cli.main([*before, *args, *after])
            except SystemExit as exited:  # argparse's own refusals
                code = int(exited.code or 0)
        out, err = capsys.readouterr()
        return code, out, err, logs

    return run
