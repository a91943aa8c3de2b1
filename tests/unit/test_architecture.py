"""The dependency direction of ARCHITECTURE.md, enforced by walking imports.

model ← storage ← (rpc, wire) ← services ← cli. ``model`` imports nothing of ours but
itself; a service never imports another service (they talk over gRPC).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ROOT / "services"

SERVICE_PACKAGES = {
    "operations",
    "notifications",
    "workspace",
    "ai_worker",
    "gateway",
    "hoststore",
}
# What each package may import from services.* besides itself.
ALLOWED: dict[str, set[str]] = {
    "model": set(),
    "settings": set(),
    "clock": set(),
    "logs": {"settings"},
    "storage": {"model", "settings", "clock"},
    "rpc": {"model", "settings", "clock"},
    "hoststore": set(),
    "wire": {"model", "storage"},
}
SERVICE_ALLOWED = {"model", "settings", "clock", "logs", "storage", "rpc", "wire"}
# SPEC §7: the AI worker holds the host operation store (a leaf library) on its host.
ALLOWED["ai_worker"] = SERVICE_ALLOWED | {"hoststore"}


def _package_of(path: Path) -> str:
    relative = path.relative_to(SERVICES)
    return relative.parts[0].removesuffix(".py")


def _imported_packages(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            parts = name.split(".")
            if parts[0] == "services" and len(parts) > 1:
                found.add(parts[1])
    return found


def _violations() -> list[str]:
    problems = []
    for path in sorted(SERVICES.rglob("*.py")):
        package = _package_of(path)
        if package in {"__init__", "cli", "up"}:  # the top: runs everything
            continue
        allowed = ALLOWED.get(package, SERVICE_ALLOWED if package in SERVICE_PACKAGES else None)
        if allowed is None:
            problems.append(f"{path.relative_to(ROOT)}: package {package!r} has no declared layer")
            continue
        for imported in _imported_packages(path) - {package} - allowed:
            problems.append(f"{path.relative_to(ROOT)} imports services.{imported}")
    return problems


def test_dependency_direction() -> None:
    assert _violations() == []


def test_model_uses_only_the_standard_library() -> None:
    import sys

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
                    if top not in sys.stdlib_module_names and top not in {"services", "__future__"}:
                        third_party.append(f"{path.name}: {module}")
    assert third_party == []
