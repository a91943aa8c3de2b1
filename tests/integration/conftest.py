"""Fixtures of the integration tests: every gRPC service on one server (and a second
replica), time moved by hand, typed clients over it, ``opsctl operations`` run
in-process against it, and a migrated SQLite file (``sqlite_path``, ``sqlite_db``) for
the tests of SQLite itself."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from durable_ops import cli
from durable_ops.model.scope import Role
from durable_ops.storage.db import Database
from tests.conftest import MakeDatabase, MigratedSqlite
from tests.support.clock import ManualClock
from tests.support.grpc_services import Services, metadata, running_services
from tests.support.keys import key_env
from tests.support.operations_client import Metadata, OpsClient

OPERATOR_NAME = "ops-carol"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def services(db_url: str, clock: ManualClock) -> Iterator[Services]:
    with running_services(db_url, clock) as running:
        yield running


@pytest.fixture
def sqlite_services(
    tmp_path: Path, clock: ManualClock, migrated_sqlite: MigratedSqlite
) -> Iterator[Services]:
    """For tests of what no engine changes (HTTP, a process's stop): SQLite alone."""
    with running_services(migrated_sqlite(tmp_path / "gateway.sqlite3"), clock) as running:
        yield running


@pytest.fixture
def other_replica(db_url: str, clock: ManualClock, services: Services) -> Iterator[Services]:
    """A second replica of the services on the same database."""
    with running_services(db_url, clock) as running:
        yield running


@pytest.fixture
def fresh_url(engine_name: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """An empty database of the test's engine, not migrated."""
    if engine_name == "sqlite":
        return f"sqlite:///{tmp_path / 'fresh.sqlite3'}"
    make: MakeDatabase = request.getfixturevalue("make_mariadb_database")
    return make()


@pytest.fixture
def sqlite_path(tmp_path: Path, migrated_sqlite: MigratedSqlite) -> Path:
    """A SQLite database file, migrated."""
    path = tmp_path / "ops.sqlite3"
    migrated_sqlite(path)
    return path


@pytest.fixture
def sqlite_db(sqlite_path: Path) -> Iterator[Database]:
    """``sqlite_path`` opened: not ``db`` (modules have their own of that name)."""
    database = Database(f"sqlite:///{sqlite_path}")
    yield database
    database.dispose()


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    """Threads for blocking calls a test makes side by side."""
    with ThreadPoolExecutor(4) as executor:
        yield executor


@pytest.fixture
def ops(services: Services) -> OpsClient:
    return OpsClient(services)


@pytest.fixture
def operator_md() -> Metadata:
    return metadata(Role.OPERATOR, subject=OPERATOR_NAME)


@pytest.fixture
def opsctl(
    services: Services, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., tuple[int, str, str]]:
    for name, value in key_env(Role.OPERATOR).items():  # the operator's own key
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("OPS_OPERATIONS_TARGET", services.target)

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        with capture_logs():  # the service's log lines, in this process too, stay off stdout
            code = cli.main(["operations", *args])
        out, err = capsys.readouterr()
        return code, out, err

    return run
