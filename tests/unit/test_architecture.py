"""The dependency direction of ARCHITECTURE.md, enforced by walking imports.

``model`` ← ``storage`` ← (``rpc``, ``wire``) ← services ← ``cli``. Two views:

- per package: what each folder of ``services/`` (the ``durable_ops`` package) may
  import; ``model`` imports nothing of ours but itself;
- per process: everything a process's entry module reaches, transitively. A
  service never reaches another (they talk over gRPC); the AI worker and the
  gateway reach neither ``storage`` nor ``wire``: they only speak gRPC.
"""

from __future__ import annotations

import ast
import sys
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ROOT / "services"  # installed as durable_ops

# The gRPC services and the other processes, each a folder of durable_ops.
GRPC_SERVICES = {"operations", "notifications", "workspace", "ai_admission"}
PROCESSES = {
    "operations": "durable_ops.operations.main",
    "notifications": "durable_ops.notifications.main",
    "workspace": "durable_ops.workspace.main",
    "ai_admission": "durable_ops.ai_admission.main",
    "gateway": "durable_ops.gateway.main",
    "ai_worker": "durable_ops.ai_worker.main",
    "dev_model": "durable_ops.dev_model.server",
}
# telemetry: OpenTelemetry setup and span helpers, a leaf every process may use;
# stop_signals: SIGTERM and SIGINT as a request to stop, in every long-running process.
SHARED = {"model", "settings", "clock", "logs", "api", "telemetry", "stop_signals"}
# private_files: the modes of var/, the SQLite files and kept secrets (storage, local_secrets).
SERVER_SIDE = SHARED | {"storage", "rpc", "wire", "serving", "private_files"}
GRPC_CLIENT_SIDE = SHARED | {"rpc", "private_files"}

# What each package may import from durable_ops.* besides itself.
ALLOWED: dict[str, set[str]] = {
    "model": set(),
    "api": set(),
    "settings": set(),
    "clock": set(),
    "stop_signals": set(),
    "logs": {"settings"},
    "telemetry": {"settings"},
    "private_files": {"settings"},
    "local_secrets": {"settings", "private_files"},
    # stack.address_file: var/stack.json is private like the rest of var/; each child is
    # handed its own service key (rpc.keys).
    "stack": {"settings", "private_files", "rpc", "model"},
    "storage": {"model", "settings", "clock", "private_files"},
    # rpc.keys: a service key is a private file, refused when others may read it.
    "rpc": {"model", "settings", "clock", "api", "private_files", "stop_signals"},
    "wire": {"model", "storage", "api", "rpc"},
    # The life of a one-servicer process over the database (serve_on_database).
    "serving": {"settings", "storage", "rpc", "stop_signals"},
    "hoststore": set(),
    **{service: SERVER_SIDE for service in GRPC_SERVICES},
    "gateway": GRPC_CLIENT_SIDE,
    # SPEC §7: the AI worker holds the host operation store (a leaf library) on its host.
    "ai_worker": GRPC_CLIENT_SIDE | {"hoststore", "worker"},
    "dev_model": {"model", "settings", "logs"},
    # The worker SDK: claims, leases and settlements for any task type, over gRPC.
    "worker": GRPC_CLIENT_SIDE,
}
# What each process may reach, transitively, besides its own folder.
REACHABLE: dict[str, set[str]] = {
    **{service: SERVER_SIDE for service in GRPC_SERVICES},
    "gateway": GRPC_CLIENT_SIDE,
    "ai_worker": GRPC_CLIENT_SIDE | {"hoststore", "worker"},
    "dev_model": {"model", "settings", "logs"},
}


def _module_path(module: str) -> Path | None:
    parts = module.split(".")[1:]
    base = SERVICES.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SERVICES).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["durable_ops", *parts])


@cache
def _imports(path: Path) -> frozenset[str]:
    """The durable_ops modules ``path`` imports (``from a import b`` counts a.b when a module)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return frozenset(
        name
        for name in found
        if name.split(".")[0] == "durable_ops" and _module_path(name) is not None
    )


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _reach(entry: str) -> set[str]:
    seen: set[str] = set()
    todo = [entry]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        path = _module_path(module)
        assert path is not None, module
        parents = [".".join(module.split(".")[:n]) for n in range(2, module.count(".") + 1)]
        todo += [*_imports(path), *parents]
    return seen


def test_package_dependency_direction() -> None:
    problems = []
    for path in sorted(SERVICES.rglob("*.py")):
        module = _module_name(path)
        package = _package(module)
        if package in {
            "",
            "cli",
            "up",
            "operator_cli",
            "console_cli",
            "status_cli",
        }:  # the top: runs everything
            continue
        if package not in ALLOWED:
            problems.append(f"{module}: package {package!r} has no declared layer")
            continue
        for imported in sorted(_imports(path)):
            target = _package(imported)
            if target not in {package, ""} and target not in ALLOWED[package]:
                problems.append(f"{module} imports {imported}")
    assert problems == []


def test_each_process_reaches_only_its_layers() -> None:
    problems = []
    for process, entry in PROCESSES.items():
        for module in sorted(_reach(entry)):
            target = _package(module)
            if target not in {process, ""} and target not in REACHABLE[process]:
                problems.append(f"{process} reaches {module}")
    assert problems == []


def test_the_walk_sees_a_forbidden_import(tmp_path: Path) -> None:
    """The process walk follows imports transitively (so the test above can fail)."""
    reached = _reach("durable_ops.operations.main")
    assert "durable_ops.storage.operations" in reached
    assert "durable_ops.model.lifecycle" in reached


def test_model_uses_only_the_standard_library() -> None:
    third_party = []
    for path in sorted((SERVICES / "model").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import | ast.ImportFrom) and getattr(node, "level", 0) == 0:
                modules = (
                    [alias.name for alias in node.names]
                    if isinstance(node, ast.Import)
                    else [node.module or ""]
                )
                for module in modules:
                    top = module.split(".")[0]
                    allowed = {"durable_ops", "__future__"}
                    if top not in sys.stdlib_module_names and top not in allowed:
                        third_party.append(f"{path.name}: {module}")
    assert third_party == []


def test_nothing_imports_the_source_folder_name() -> None:
    """``services`` is a folder, not a package name: importing it would load a second copy."""
    found = []
    for folder in ("services", "migrations", "tests", "benchmarks", "scripts"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "api" in path.relative_to(ROOT).parts[:2]:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                names = []
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                found += [
                    f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] == "services"
                ]
    assert found == []


# The ORM's own transaction machinery: every statement runs in a storage.tx.Tx instead
# (ADR 0008), where the one owner-scope rule is checked.
ORM_SESSIONS = {"Session", "sessionmaker", "scoped_session", "with_loader_criteria"}


def test_one_way_to_the_database_no_orm_session() -> None:
    found = []
    for folder in ("services", "tests", "benchmarks", "scripts"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                    "sqlalchemy.orm"
                ):
                    names = {alias.name for alias in node.names} & ORM_SESSIONS
                    found += [f"{path.relative_to(ROOT)}: {name}" for name in sorted(names)]
    assert found == []
