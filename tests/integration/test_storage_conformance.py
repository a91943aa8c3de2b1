"""The storage conformance suite (``tests/support/storage_conformance.py``) on SQLite and
MariaDB, a fresh database per case; ``tests/e2e/test_galera.py`` runs it on Galera."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from durable_ops.storage.db import Database
from tests.support.storage_conformance import CASES


@pytest.mark.parametrize("case", CASES, ids=[case.__name__ for case in CASES])
def test_storage_conforms(database: Database, case: Callable[[Database], None]) -> None:
    case(database)
