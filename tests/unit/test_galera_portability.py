"""What a Galera cluster does not replicate or lock across nodes is used nowhere (ADR 0017).

Galera replicates InnoDB row events only, certifies write sets by primary
key, and does not take ``GET_LOCK``, ``LOCK TABLES`` or ``FOR UPDATE`` locks
on other nodes; it refuses XA. So: no advisory or table locks, no XA, no
other storage engine, and every table the revisions create has a primary key
and says ``ENGINE=InnoDB`` (the cluster test checks the same in
``information_schema`` of a migrated database). One place takes a named lock on
purpose and not on Galera: two ``opsctl migrate`` on one MariaDB server take turns
(``storage.migrate.migration_lock``); on a Galera node it is skipped.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from durable_ops.storage.db import RETRYABLE_MYSQL_ERRORS

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted(
    path
    for folder in ("services", "migrations")
    for path in (ROOT / folder).rglob("*.py")
    if "api" not in path.relative_to(ROOT).parts[:2]  # generated protobuf code
)
FORBIDDEN = {
    "GET_LOCK": re.compile(r"\bGET_LOCK\s*\(", re.IGNORECASE),
    "RELEASE_LOCK": re.compile(r"\bRELEASE_LOCK\s*\(", re.IGNORECASE),
    "LOCK TABLES": re.compile(r"\bLOCK\s+TABLES?\b", re.IGNORECASE),
    "XA": re.compile(r"\bXA\s+(START|BEGIN|END|PREPARE|COMMIT|ROLLBACK|RECOVER)\b", re.IGNORECASE),
    "MyISAM/Aria/MEMORY": re.compile(r"ENGINE\s*=\s*(MyISAM|Aria|MEMORY)\b", re.IGNORECASE),
}


def test_the_sources_are_found() -> None:
    assert any(path.name == "operations.py" for path in SOURCES)
    assert any(path.parent.name == "versions" for path in SOURCES)


SKIPPED_ON_GALERA = {"GET_LOCK": 1, "RELEASE_LOCK": 1}  # the migration lock's, in migrate.py


@pytest.mark.parametrize("what", sorted(FORBIDDEN))
def test_nothing_relies_on_what_galera_does_not_replicate(what: str) -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in SOURCES
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if FORBIDDEN[what].search(line)
    ]
    migration_lock = [place for place in found if place.startswith("services/storage/migrate.py:")]
    assert len(migration_lock) == SKIPPED_ON_GALERA.get(what, 0)
    assert [place for place in found if place not in migration_lock] == []


def test_the_migration_lock_is_not_taken_on_galera() -> None:
    source = (ROOT / "services" / "storage" / "migrate.py").read_text()
    named_lock = source[source.index("def _named_lock") :]
    assert named_lock.index("if on_galera(connection):") < named_lock.index("GET_LOCK")


def test_every_table_a_revision_creates_on_mariadb_is_innodb_with_a_primary_key() -> None:
    creates = [
        statement
        for path in sorted((ROOT / "migrations" / "versions").glob("*.py"))
        for statement in re.findall(
            r"CREATE TABLE IF NOT EXISTS .*?\)\s*ENGINE=\w+[^\"]*", path.read_text(), re.DOTALL
        )
    ]
    assert len(creates) >= 7  # every table of the schema
    for statement in creates:
        assert "PRIMARY KEY" in statement, statement.splitlines()[0]
        assert "ENGINE=InnoDB" in statement, statement.splitlines()[0]


def test_galera_refusals_are_replayed() -> None:
    assert {1047, 1205, 1213} <= RETRYABLE_MYSQL_ERRORS
