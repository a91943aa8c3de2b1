"""Shared fixtures: real databases on both engines, never mocks.

MariaDB comes from ``OPS_TEST_MARIADB_URL`` when set, else from testcontainers
when a Docker engine answers, else from a server on 127.0.0.1:3306. Each test
session gets its own throwaway database. ``OPS_REQUIRE_MARIADB=1`` (set by
``.ci/run``) turns "no MariaDB" into a failure instead of a skip.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path

import pymysql
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from durable_ops.storage import migrate
from durable_ops.storage.db import Database
from durable_ops.storage.schema import Base

ENGINES = ["sqlite", "mariadb"]
MakeDatabase = Callable[[], str]


def _require_mariadb() -> bool:
    return os.environ.get("OPS_REQUIRE_MARIADB") == "1"


def _docker_answers() -> bool:
    try:
        import docker

        docker.from_env(timeout=2).ping()
        return True
    except Exception:
        return False


def _server_answers(url: str) -> bool:
    parsed = make_url(url)
    try:
        pymysql.connect(
            host=parsed.host or "127.0.0.1",
            port=parsed.port or 3306,
            user=parsed.username or "root",
            password=parsed.password or "",
            connect_timeout=3,
        ).close()
        return True
    except pymysql.MySQLError:
        return False


@pytest.fixture(scope="session")
def mariadb_server_url() -> Iterator[str]:
    """A URL of a MariaDB server (no database selected)."""
    explicit = os.environ.get("OPS_TEST_MARIADB_URL")
    if explicit:
        yield explicit
        return
    if _docker_answers():
        from testcontainers.mysql import MySqlContainer

        with MySqlContainer("mariadb:11.4", dialect="pymysql") as container:
            yield container.get_connection_url()
        return
    local = "mysql+pymysql://root@127.0.0.1:3306/"
    if _server_answers(local):
        yield local
        return
    message = "no MariaDB: set OPS_TEST_MARIADB_URL, run Docker, or start one on 127.0.0.1:3306"
    if _require_mariadb():
        pytest.fail(message)
    pytest.skip(message)


def _admin(url: str) -> pymysql.connections.Connection:
    parsed = make_url(url)
    return pymysql.connect(
        host=parsed.host or "127.0.0.1",
        port=parsed.port or 3306,
        user=parsed.username or "root",
        password=parsed.password or "",
        autocommit=True,
    )


@pytest.fixture(scope="session")
def make_mariadb_database(mariadb_server_url: str) -> Iterator[MakeDatabase]:
    """Create throwaway databases on the server; all are dropped when the session ends."""
    created: list[str] = []

    def create() -> str:
        name = f"ops_test_{secrets.token_hex(6)}"
        with _admin(mariadb_server_url).cursor() as cursor:
            cursor.execute(f"CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
        created.append(name)
        return make_url(mariadb_server_url).set(database=name).render_as_string(hide_password=False)

    yield create
    connection = _admin(mariadb_server_url)
    with connection.cursor() as cursor:
        for name in created:
            cursor.execute(f"DROP DATABASE IF EXISTS {name}")
    connection.close()


@pytest.fixture(scope="session")
def migrated_mariadb_url(make_mariadb_database: MakeDatabase) -> str:
    url = make_mariadb_database()
    migrate.upgrade(url)
    return url


@pytest.fixture(params=ENGINES)
def engine_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def db_url(engine_name: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A migrated, empty database URL on the parametrised engine."""
    if engine_name == "sqlite":
        sqlite_url = f"sqlite:///{tmp_path / 'ops.sqlite3'}"
        migrate.upgrade(sqlite_url)
        return sqlite_url
    mariadb_url: str = request.getfixturevalue("migrated_mariadb_url")
    _empty_all_tables(mariadb_url)
    return mariadb_url


@pytest.fixture
def database(db_url: str) -> Iterator[Database]:
    db = Database(db_url)
    yield db
    db.dispose()


def _empty_all_tables(url: str) -> None:
    db = Database(url, pool_size=1)
    try:
        with db.engine.begin() as connection:
            for table in reversed(Base.metadata.sorted_tables):
                if table.name != "ai_admission_control":
                    connection.execute(table.delete())
            connection.execute(text("UPDATE ai_admission_control SET ai_enabled = 1"))
    finally:
        db.dispose()
