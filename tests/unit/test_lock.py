"""uv.lock and its exports under requirements/ agree with pyproject.toml.

scripts/bootstrap.sh installs the lock as committed (``uv sync --frozen``, or pip
from an export), never re-resolving: a dependency changed in pyproject.toml without
``scripts/lock.sh`` would not be installed at all. These checks run uv offline (the
uv that uv.lock pins, a dev dependency that bootstrap installs into .venv).
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIX = "run scripts/lock.sh and commit uv.lock and requirements/"
# Each export and the arguments scripts/lock.sh makes it with (its header records them).
EXPORTS = {
    "requirements/run.txt": [],
    "requirements/dev.txt": ["--extra", "dev", "--extra", "bench"],
}


def _uv() -> str:
    beside = Path(sys.executable).parent / "uv"  # .venv/bin/uv
    found = str(beside) if beside.is_file() else shutil.which("uv")
    if found is None:
        pytest.skip(f"no uv beside {sys.executable} nor on PATH: scripts/bootstrap.sh installs it")
    return found


def _run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "UV_OFFLINE": "1", "UV_PYTHON_DOWNLOADS": "never", "NO_COLOR": "1"}
    return subprocess.run(
        [_uv(), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


def _check(cwd: Path) -> subprocess.CompletedProcess[str]:
    return _run("lock", "--check", "--offline", cwd=cwd)


def test_the_lock_matches_pyproject() -> None:
    result = _check(ROOT)
    assert result.returncode == 0, f"uv.lock is out of date ({FIX}):\n{result.stderr}"


@pytest.mark.parametrize("export", sorted(EXPORTS))
def test_the_export_is_the_lock(export: str) -> None:
    result = _run(
        "export", "--frozen", "--format", "requirements-txt", "--no-emit-project", *EXPORTS[export]
    )
    assert result.returncode == 0, result.stderr
    assert (ROOT / export).read_text() == result.stdout, f"{export} differs from uv.lock ({FIX})"


def _extras(args: list[str]) -> set[str]:
    return {value for flag, value in itertools.pairwise(args) if flag == "--extra"}


def test_the_full_export_has_every_extra_and_the_light_one_none() -> None:
    """The extras scripts/bootstrap.sh installs: all of them (test.sh), or none (run.sh)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert _extras(EXPORTS["requirements/dev.txt"]) == set(project["optional-dependencies"]), (
        "a new extra: lock it in EXPORTS, scripts/lock.sh and scripts/bootstrap.sh"
    )
    names = {
        export: {line.split("==")[0] for line in (ROOT / export).read_text().splitlines()}
        for export in EXPORTS
    }
    assert {"pytest", "procrastinate", "uv", "grpcio"} <= names["requirements/dev.txt"]
    assert "grpcio" in names["requirements/run.txt"]
    assert not {"pytest", "procrastinate", "uv"} & names["requirements/run.txt"]


def test_the_check_fails_when_pyproject_moves_alone(tmp_path: Path) -> None:
    """What the first test relies on: a floor moved in pyproject.toml alone is caught."""
    shutil.copy(ROOT / "uv.lock", tmp_path)
    pyproject = (ROOT / "pyproject.toml").read_text()
    (tmp_path / "pyproject.toml").write_text(pyproject)
    assert _check(tmp_path).returncode == 0  # the copy itself is current
    assert '"structlog>=24.4"' in pyproject
    moved = pyproject.replace('"structlog>=24.4"', '"structlog>=24.5"')
    (tmp_path / "pyproject.toml").write_text(moved)
    # "needs to be updated"; or, with a cache that holds only what bootstrap installed,
    # that the re-resolution this takes cannot be done offline: a failure either way.
    assert _check(tmp_path).returncode != 0
