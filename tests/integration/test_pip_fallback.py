"""The pip fallback of ``scripts/bootstrap.sh`` installs the lock on this machine.

Where uv cannot be had, bootstrap installs ``requirements/run.txt`` (the lock's
export) with ``pip --require-hashes``, then the project without dependencies.
Here it runs for real in a copy of the checkout whose ``.venv`` it creates under
a temporary folder, then the installed package is imported: pip's resolver
accepts the exported set (on this machine's index ``pip install -e .`` once
failed with ResolutionImpossible), every file matches its hash, and the
package imports with exactly those versions.

pip takes the wheels from a wheelhouse kept outside the repository
(``~/.cache/durable-ops/pip-wheels/<the export's hash>``), filled from the
index by ``pip download --require-hashes`` the first time an export is seen;
with no index to reach, bootstrap's attempt to install uv fails, which is the
fallback's own condition. Warm, the test costs the install of 47 wheels: about
16 s of CPU (55-80 s of wall time measured on two cores shared with a load of 15),
without compiling them (``PIP_COMPILE=0``);
the first run also downloads them (17 MB).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS = ROOT / "requirements" / "run.txt"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "durable-ops"
# What a clone has beside its sources; the rest is built, installed or cached here.
NOT_COPIED = shutil.ignore_patterns(
    ".git", ".venv", "var", "build", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis"
)
# The package, and what the services, the gateway and the worker import.
IMPORTED = ("durable_ops.cli", "durable_ops.operations.main", "durable_ops.gateway.main")
PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check"]


def _wheelhouse() -> Path:
    """The export's wheels (and the build backend's), downloaded once per export."""
    python = f"cp{sys.version_info.major}{sys.version_info.minor}"
    key = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:16]
    wheelhouse = CACHE / "pip-wheels" / f"{python}-{key}"
    if wheelhouse.is_dir():
        return wheelhouse
    filling = wheelhouse.with_name(f".{wheelhouse.name}.{os.getpid()}")
    download = [*PIP, "download", "--quiet", "--dest", str(filling)]
    subprocess.run([*download, "--require-hashes", "-r", str(REQUIREMENTS)], check=True)
    build = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    subprocess.run([*download, *build], check=True)  # what the editable install builds with
    try:
        filling.rename(wheelhouse)  # whole or not at all; another worker may have won
    except OSError:
        shutil.rmtree(filling)
    return wheelhouse


def test_bootstrap_without_uv_installs_the_exported_lock_with_pip(tmp_path: Path) -> None:
    wheelhouse = _wheelhouse()
    clone = tmp_path / "clone"
    shutil.copytree(ROOT, clone, ignore=NOT_COPIED, symlinks=True)
    env = {key: value for key, value in os.environ.items() if not key.startswith("VIRTUAL_ENV")}
    env |= {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheelhouse), "PYTHON": sys.executable}
    # pip's compiling of every installed module is half the CPU of this test (27 s of 50,
    # measured in CI) and none of what it checks: the files, their hashes, the imports.
    env["PIP_COMPILE"] = "0"  # pip's --compile off (PIP_NO_COMPILE=1 would turn it on)
    done = subprocess.run(
        [clone / "scripts" / "bootstrap.sh", "--run"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    steps = [line for line in done.stdout.splitlines() if line.startswith("bootstrap:")]
    assert steps[-1].endswith("pip installs requirements/run.txt (hashes checked)…"), steps

    python = clone / ".venv" / "bin" / "python"
    imported = subprocess.run(
        [python, "-c", f"import {', '.join(IMPORTED)}; print(durable_ops.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert imported.returncode == 0, imported.stderr
    assert Path(imported.stdout.strip()).is_relative_to(clone / "services")
    # Exactly the locked versions: pip's own check finds nothing missing or in conflict.
    checked = subprocess.run(
        [python, "-m", "pip", "check"], capture_output=True, text=True, timeout=120
    )
    assert checked.returncode == 0, checked.stdout
