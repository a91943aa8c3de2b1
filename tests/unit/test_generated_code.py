"""services/api/ (``durable_ops.api``) is exactly what scripts/generate_protos.py writes."""

from __future__ import annotations

import filecmp
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _differences(left: Path, right: Path) -> list[str]:
    comparison = filecmp.dircmp(left, right, ignore=["__pycache__"])
    found = [f"only in services/api/: {name}" for name in comparison.left_only]
    found += [f"missing from services/api/: {name}" for name in comparison.right_only]
    found += [
        f"differs: {name}"
        for name in comparison.common_files
        if (left / name).read_bytes() != (right / name).read_bytes()
    ]
    for name in comparison.common_dirs:
        found += _differences(left / name, right / name)
    return found


def test_generated_code_matches_protos(tmp_path: Path) -> None:
    out = tmp_path / "api"
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "generate_protos.py"), "--out", str(out)],
        check=True,
    )
    assert _differences(ROOT / "services" / "api", out) == []
