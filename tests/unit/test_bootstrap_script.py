"""``scripts/bootstrap.sh`` installs once per pyproject.toml, and a light run asks for less.

The script runs for real in a copy of the project whose ``.venv/bin/python``
only records how it was called: pip itself is not what is tested here.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RECORDER = """#!/bin/sh
echo "$*" >> "$(dirname "$0")/../calls"
if [ "$*" != "${*#*install --quiet -e}" ]; then
  printf '#!/bin/sh\\n' > "$(dirname "$0")/opsctl" && chmod +x "$(dirname "$0")/opsctl"
fi
"""


def _project(tmp_path: Path) -> Path:
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "bootstrap.sh", tmp_path / "scripts")
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(RECORDER)
    python.chmod(0o755)
    return tmp_path


def _installs(project: Path, *args: str) -> list[str]:
    calls = project / ".venv" / "calls"
    before = calls.read_text().splitlines() if calls.exists() else []
    subprocess.run([project / "scripts" / "bootstrap.sh", *args], check=True, timeout=30)
    after = calls.read_text().splitlines() if calls.exists() else []
    return [call for call in after[len(before) :] if " -e " in call]


def test_pip_runs_only_when_pyproject_or_the_extras_asked_for_change(tmp_path: Path) -> None:
    project = _project(tmp_path)
    assert _installs(project, "--run") == ["-m pip install --quiet -e ."]
    assert _installs(project, "--run") == []  # nothing changed
    assert _installs(project) == ["-m pip install --quiet -e .[dev,bench]"]  # the tools too
    assert _installs(project) == []
    assert _installs(project, "--run") == []  # a full install serves a light run
    with (project / "pyproject.toml").open("a") as pyproject:
        pyproject.write("\n# a new dependency\n")
    assert _installs(project, "--run") == ["-m pip install --quiet -e ."]
    assert _installs(project) == ["-m pip install --quiet -e .[dev,bench]"]
