"""What the AI worker refuses to start with, and what it may import."""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

import pytest

from durable_ops.ai_worker.main import check_settings
from durable_ops.model.errors import InvalidArgument
from durable_ops.settings import Settings, SettingsError

ROOT = Path(__file__).resolve().parents[2]
WORKER_PACKAGES = [ROOT / "services/ai_worker", ROOT / "services/ai_worker/handlers"]
# The worker reaches the database only through gRPC: never durable_ops.storage or a service.
MAY_IMPORT = {"ai_worker", "model", "settings", "clock", "logs", "rpc", "hoststore"}


def test_defaults_are_accepted() -> None:
    check_settings(Settings())


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"worker_lease_seconds": 4}, InvalidArgument),
        ({"worker_lease_seconds": 601}, InvalidArgument),
        ({"worker_concurrency": -1}, InvalidArgument),
        ({"worker_concurrency": 65}, InvalidArgument),
        ({"worker_task_timeout_seconds": 0.0}, SettingsError),
        ({"worker_poll_seconds": -1.0}, SettingsError),
        ({"host_store_dir": "/var/lib/ops", "worker_concurrency": 2}, SettingsError),
    ],
)
def test_settings_the_worker_cannot_honour_are_refused(
    changes: dict[str, object], error: type[Exception]
) -> None:
    with pytest.raises(error):
        check_settings(replace(Settings(), **changes))  # type: ignore[arg-type]


def _services_imported(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        found |= {name.split(".")[1] for name in names if name.startswith("services.")}
    return found


def test_the_worker_imports_no_storage_and_no_other_service() -> None:
    files = [path for package in WORKER_PACKAGES for path in package.rglob("*.py")]
    assert len(files) >= 10
    offending = {
        str(path.relative_to(ROOT)): sorted(_services_imported(path) - MAY_IMPORT)
        for path in files
        if _services_imported(path) - MAY_IMPORT
    }
    assert offending == {}
