"""What the AI worker refuses to start with (``Settings`` refuses it, in every process,
``opsctl up`` among them), and what the worker may import."""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

import pytest

from durable_ops.settings import Settings, SettingsError

ROOT = Path(__file__).resolve().parents[2]
WORKER_PACKAGES = [ROOT / "services/ai_worker", ROOT / "services/ai_worker/handlers"]
# The worker reaches the database only through gRPC: never durable_ops.storage or a service.
MAY_IMPORT = {"ai_worker", "model", "settings", "clock", "logs", "rpc", "hoststore"}


def test_the_worker_settings_opsctl_up_hands_it_are_accepted() -> None:
    Settings(workers_ai_operations_enabled=True, host_store_dir="/var/lib/ops")
    Settings(ai_external_url="https://models.example/v1", ai_external_model="big-model")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"worker_lease_seconds": 4}, "OPS_WORKER_LEASE_SECONDS must be between 5 and 600, not 4"),
        ({"worker_lease_seconds": 601}, "OPS_WORKER_LEASE_SECONDS must be between 5 and 600"),
        ({"worker_concurrency": -1}, "OPS_WORKER_CONCURRENCY must be between 0 and 64, not -1"),
        ({"worker_concurrency": 99}, "OPS_WORKER_CONCURRENCY must be between 0 and 64, not 99"),
        ({"worker_task_timeout_seconds": 0.0}, "OPS_WORKER_TASK_TIMEOUT_SECONDS must be a"),
        ({"worker_poll_seconds": -1.0}, "OPS_WORKER_POLL_SECONDS must be a number of seconds"),
        (
            {"host_store_dir": "/var/lib/ops", "worker_concurrency": 2},
            "OPS_HOST_STORE_DIR needs OPS_WORKER_CONCURRENCY 1 or 0 (the default), not 2",
        ),
        ({"ai_circuit_failures": 0}, "OPS_AI_CIRCUIT_FAILURES must be at least 1, not 0"),
        (
            {"ai_circuit_cooldown_seconds": -1.0},
            "OPS_AI_CIRCUIT_COOLDOWN_SECONDS must be a number of seconds, 0 or more, not -1.0",
        ),
        ({"ai_local_url": "127.0.0.1:8081/v1"}, "OPS_AI_LOCAL_URL must be an http or https URL"),
        ({"ai_local_url": "http://"}, "OPS_AI_LOCAL_URL must be an http or https URL"),
        ({"ai_local_model": ""}, "OPS_AI_LOCAL_MODEL must be 1 to 128 characters, not ''"),
        ({"ai_local_model": "m" * 129}, "OPS_AI_LOCAL_MODEL must be 1 to 128 characters"),
        (
            {"ai_external_url": "ftp://models.example/v1", "ai_external_model": "big"},
            "OPS_AI_EXTERNAL_URL must be an http or https URL",
        ),
        (
            {"ai_external_url": "https://models.example/v1"},
            "OPS_AI_EXTERNAL_MODEL must be 1 to 128 characters when OPS_AI_EXTERNAL_URL is set",
        ),
    ],
)
def test_settings_the_worker_cannot_honour_are_refused_naming_the_variable(
    changes: dict[str, object], message: str
) -> None:
    with pytest.raises(SettingsError) as refused:
        replace(Settings(), **changes)  # type: ignore[arg-type]
    assert str(refused.value).startswith(message)


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
