"""``scripts/bootstrap.sh`` installs from the lock once per lock, and a light run asks for less.

The script runs for real in a copy of the project whose ``.venv/bin/python`` and
``.venv/bin/uv`` only record how they were called: neither pip nor uv is what is
tested here (tests/unit/test_lock.py checks the lock itself).
"""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# pip: installing uv==V writes the fake uv below (unless .venv/no-uv says uv cannot be
# had); an editable install makes the opsctl that a finished install leaves.
PYTHON = """#!/bin/sh
venv=$(dirname "$0")/..
echo "$*" >> "$venv/calls"
case "$*" in
  *"pip install"*" uv=="*)
    [ -e "$venv/no-uv" ] && exit 1
    echo "${*##*uv==}" > "$venv/uv-version"
    cp "$venv/fake-uv" "$venv/bin/uv" && chmod +x "$venv/bin/uv" ;;
  *"--no-deps -e ."*)
    printf '#!/bin/sh\\n' > "$venv/bin/opsctl" && chmod +x "$venv/bin/opsctl" ;;
esac
"""
UV = """#!/bin/sh
venv=$(dirname "$0")/..
if [ "$1" = --version ]; then echo "uv $(cat "$venv/uv-version") (x86_64-linux)"; exit; fi
echo "uv $*" >> "$venv/calls"
printf '#!/bin/sh\\n' > "$venv/bin/opsctl" && chmod +x "$venv/bin/opsctl"
"""
# Not --quiet: its progress is the step's output.
SYNC = "uv sync --frozen --inexact --compile-bytecode"
# The project's own modules, which no install compiles (compileall skips what is current).
COMPILE = "-m compileall -q -j 0 services"


def _locked_uv() -> str:
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    (version,) = [p["version"] for p in lock["package"] if p["name"] == "uv"]
    return str(version)


def _project(tmp_path: Path) -> Path:
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "bootstrap.sh", tmp_path / "scripts")
    for name in ("pyproject.toml", "uv.lock"):
        shutil.copy(ROOT / name, tmp_path)
    shutil.copytree(ROOT / "requirements", tmp_path / "requirements")
    venv = tmp_path / ".venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text(PYTHON)
    (venv / "bin" / "python").chmod(0o755)
    (venv / "fake-uv").write_text(UV)
    return tmp_path


def _calls(project: Path, *args: str) -> list[str]:
    calls = project / ".venv" / "calls"
    before = calls.read_text().splitlines() if calls.exists() else []
    subprocess.run(
        [project / "scripts" / "bootstrap.sh", *args], check=True, timeout=30, capture_output=True
    )
    after = calls.read_text().splitlines() if calls.exists() else []
    *installed, compiled = after[len(before) :]
    assert compiled == COMPILE  # every call, the last thing it does
    return installed


def _append(path: Path) -> None:
    with path.open("a") as file:
        file.write("\n# a change\n")


def test_uv_syncs_the_lock_only_when_the_lock_or_the_extras_asked_for_change(
    tmp_path: Path,
) -> None:
    project = _project(tmp_path)
    # The uv that uv.lock pins is installed once, then syncs the runtime packages.
    assert _calls(project, "--run") == [
        f"-m pip install --quiet --disable-pip-version-check uv=={_locked_uv()}",
        SYNC,
    ]
    assert _calls(project, "--run") == []  # nothing changed
    assert _calls(project) == [f"{SYNC} --extra dev --extra bench"]  # the tools too
    assert _calls(project) == []
    assert _calls(project, "--run") == []  # a full install serves a light run
    _append(project / "uv.lock")
    assert _calls(project, "--run") == [SYNC]
    assert _calls(project) == [f"{SYNC} --extra dev --extra bench"]
    _append(project / "pyproject.toml")  # the project's own metadata (entry points)
    assert _calls(project) == [f"{SYNC} --extra dev --extra bench"]


def test_without_uv_pip_installs_the_exported_lock_checking_hashes(tmp_path: Path) -> None:
    project = _project(tmp_path)
    (project / ".venv" / "no-uv").touch()
    pip = "-m pip install --quiet --disable-pip-version-check"
    pip_shown = "-m pip install --disable-pip-version-check --progress-bar on"
    tried_uv = f"{pip} uv=={_locked_uv()}"
    assert _calls(project, "--run") == [
        tried_uv,
        f"{pip_shown} --require-hashes -r requirements/run.txt",
        f"{pip} --no-deps -e .",
    ]
    assert _calls(project, "--run") == []
    assert _calls(project) == [
        tried_uv,
        f"{pip_shown} --require-hashes -r requirements/dev.txt",
        f"{pip} --no-deps -e .",
    ]
    assert _calls(project) == []


def test_each_step_says_what_it_does_and_an_install_up_to_date_says_nothing(
    tmp_path: Path,
) -> None:
    project = _project(tmp_path)

    def said(*args: str) -> list[str]:
        done = subprocess.run(
            [project / "scripts" / "bootstrap.sh", *args],
            check=True,
            timeout=30,
            capture_output=True,
            text=True,
        )
        return [line for line in done.stdout.splitlines() if line.startswith("bootstrap:")]

    assert said("--run") == [
        f"bootstrap: installing uv {_locked_uv()}…",
        "bootstrap: installing durable-ops (run) at the versions uv.lock pins, with uv…",
    ]
    assert said("--run") == []
