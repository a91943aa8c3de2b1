"""Is a database at the head revision? Answered without Alembic, and for a SQLite file
without SQLAlchemy either: what ``opsctl up`` asks before it starts anything, so a warm
start loads neither (``storage.migrate`` moves the schema when the answer is no). So is
its other question, whether its demo user has the Pro plan with AI on already (else
``opsctl up`` grants it through ``storage.workspace``).

The figure that needs this second answer beside Alembic's: the warm start of
``scripts/run.sh`` (issue 38, target 4 s; Alembic's imports cost each process
about a second of CPU, and ``benchmarks/warm_start.py`` measured 10 s → 7 s with
this and the other start changes)."""

from __future__ import annotations

import contextlib
import re
import sqlite3
from functools import cache
from pathlib import Path

import durable_ops.migrations

VERSIONS = Path(durable_ops.migrations.__file__).parent / "versions"
_REVISION_LINE = re.compile(r'^(down_revision|revision) = (None|"([^"]+)")$', re.MULTILINE)
_SQLITE_FILE = "sqlite:///"


@cache
def quick_head() -> str | None:
    """The head read from each revision file's ``revision`` and ``down_revision`` lines;
    None when they do not name exactly one head (Alembic then decides). A test holds it
    to Alembic's own answer."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for script in VERSIONS.glob("*.py"):
        found = {name: value for name, _, value in _REVISION_LINE.findall(script.read_text())}
        if "revision" in found:
            revisions.add(found["revision"])
            if found.get("down_revision"):
                parents.add(found["down_revision"])
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 else None


def sqlite_file_at_head(url: str) -> bool | None:
    """For a SQLite file URL: whether the file exists and is stamped at head, read with
    the standard library. None for any other URL (the caller asks through an engine)."""
    if not url.startswith(_SQLITE_FILE) or url == _SQLITE_FILE:
        return None
    path = Path(url[len(_SQLITE_FILE) :].partition("?")[0])
    head = quick_head()
    if head is None or not path.is_file():
        return False
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as connection:
        try:
            stamped = connection.execute("SELECT version_num FROM alembic_version").fetchall()
        except sqlite3.DatabaseError:  # no such table, or not a database
            return False
    return stamped == [(head,)]


def sqlite_file_grants_ai(url: str, owner: str) -> bool:
    """For a SQLite file at head: whether ``owner`` has the Pro plan with AI on. False
    when that is not known so (any other URL, no such file or row): the caller grants."""
    if not sqlite_file_at_head(url):
        return False
    path = Path(url[len(_SQLITE_FILE) :].partition("?")[0])
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as connection:
        found = connection.execute(
            "SELECT ai_enabled, plan FROM user_ai_settings WHERE owner_user_id = ?", (owner,)
        ).fetchall()
    return found == [(1, "pro")]
