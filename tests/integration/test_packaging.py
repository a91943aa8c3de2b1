"""The built wheel installs one package, ``durable_ops``, and works from anywhere.

pyproject.toml maps the source folders (``services/``, ``migrations/``) onto that
package; these tests build the real wheel and install it beside nothing else,
so a folder left out of the mapping, or a data file left out of the wheel,
fails here rather than in an image.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built from a copy of what the Dockerfile copies: no stale build/ tree to hide a gap."""
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for folder in ("services", "migrations"):
        shutil.copytree(
            ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__")
        )
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(out),
            str(source),
        ],
        check=True,
        capture_output=True,
        cwd=out,
    )
    (built,) = out.glob("durable_ops-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "-t", str(target), str(wheel)],
        check=True,
        capture_output=True,
    )
    return target


def _names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def _package_folders() -> set[str]:
    """Every package of the source tree, as a folder of the installed package."""
    folders = {
        "durable_ops/" + str(path.parent.relative_to(ROOT / "services"))
        for path in (ROOT / "services").rglob("__init__.py")
    }
    folders |= {
        "durable_ops/migrations/" + str(path.parent.relative_to(ROOT / "migrations"))
        for path in (ROOT / "migrations").rglob("__init__.py")
    }
    return {folder.removesuffix("/.") for folder in folders}


def test_the_wheel_holds_one_top_level_package(wheel: Path) -> None:
    tops = {name.split("/")[0] for name in _names(wheel)}
    dist_info = {top for top in tops if top.endswith(".dist-info")}
    assert tops - dist_info == {"durable_ops"}
    assert len(dist_info) == 1


def test_every_source_package_and_data_file_is_in_the_wheel(wheel: Path) -> None:
    names = set(_names(wheel))
    missing = sorted(f for f in _package_folders() if f"{f}/__init__.py" not in names)
    assert missing == [], f"add these to [tool.setuptools] packages: {missing}"
    for data in (
        "durable_ops/migrations/script.py.mako",
        "durable_ops/gateway/web/page.html",
        "durable_ops/gateway/web/static/app.js",
        "durable_ops/gateway/web/static/pages/operations.js",
        "durable_ops/api/operations/v1/operations_pb2.pyi",
        "durable_ops/api/operations/v1/operations_pb2_grpc.pyi",
        "durable_ops/py.typed",
    ):
        assert data in names, data


def test_the_console_script_is_opsctl(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        (entry_points,) = [n for n in archive.namelist() if n.endswith("entry_points.txt")]
        text = archive.read(entry_points).decode()
    assert "opsctl = durable_ops.cli:main" in text


def _run_installed(installed: Path, cwd: Path, program: str) -> None:
    """Run ``program`` from outside the checkout: only the installed copy can be imported."""
    env = {**os.environ, "PYTHONPATH": str(installed), "OPS_DATABASE_URL": ""}
    done = subprocess.run(
        [sys.executable, "-c", program],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_the_installed_wheel_migrates_and_serves_its_pages(installed: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ops.sqlite3'}"
    migrate = (
        "import durable_ops, sys\n"
        f"assert durable_ops.__file__.startswith({str(installed)!r}), durable_ops.__file__\n"
        "from durable_ops.cli import main\n"
        f"sys.exit(main(['migrate', '--database-url', {url!r}]))\n"
    )
    _run_installed(installed, tmp_path, migrate)
    pages = (
        "from durable_ops.gateway.web import WEB_DIR\n"
        f"assert str(WEB_DIR).startswith({str(installed)!r}), WEB_DIR\n"
        "assert (WEB_DIR / 'page.html').is_file() and (WEB_DIR / 'static' / 'app.js').is_file()\n"
    )
    _run_installed(installed, tmp_path, pages)
