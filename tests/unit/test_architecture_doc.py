"""docs/architecture.md's tree is the tree: every file and folder it names exists, and it
names every top-level module and every module of the worker SDK and the AI worker."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ROOT / "services"
# What the tree names lives in these; ``.venv`` and the like are never searched.
SEARCHED = ("services", "migrations", "protos", "tests", "benchmarks", "scripts", "docs")
# A module (``storage/events.py``) or a folder (``handlers/``) as the tree writes it; not
# the start of another path (``var/stack.json``, a file of the running stack).
NAMED = re.compile(r"(?<![\w<>/.-])((?:[a-z_0-9]+/)*(?:[a-z_0-9]+\.py|[a-z_0-9]+/))(?![\w.<])")
# Made by the running product, not part of the tree.
MADE_AT_RUN_TIME = {"var/"}
# Listed module by module, not only as a folder.
LISTED_IN_FULL = (SERVICES, SERVICES / "worker", SERVICES / "ai_worker")


def _tree() -> str:
    text = (ROOT / "docs" / "architecture.md").read_text()
    return text.split("```\n", 2)[1]


def _named() -> set[str]:
    return set(NAMED.findall(_tree()))


def _exists(name: str) -> bool:
    """Where a name is relative to its entry, any path ending with it will do."""
    wanted = name.rstrip("/")
    for top in SEARCHED:
        for path in (ROOT / top).rglob(Path(wanted).name):
            if (
                "__pycache__" not in path.parts
                and path.as_posix().endswith(f"/{wanted}")
                and path.is_dir() == name.endswith("/")
            ):
                return True
    return (ROOT / wanted).exists()


def test_every_file_and_folder_the_tree_names_exists() -> None:
    named = _named()
    assert len(named) > 40  # the pattern still reads the tree
    assert sorted(name for name in named - MADE_AT_RUN_TIME if not _exists(name)) == []


def test_the_tree_names_every_module_of_the_packages_it_lists_in_full() -> None:
    named = {Path(name.rstrip("/")).name for name in _named()}
    missing = [
        path.relative_to(ROOT).as_posix()
        for package in LISTED_IN_FULL
        for path in sorted(package.iterdir())
        if (path.suffix == ".py" and path.name != "__init__.py" and path.stem + ".py" not in named)
        or (path.is_dir() and path.name != "__pycache__" and path.name not in named)
    ]
    assert missing == []
