"""Throwaway databases: MariaDB (migrated), SQLite (migrated) and PostgreSQL (empty).

Every database made here is dropped when its context ends. Servers come from
``OPS_BENCH_MARIADB_URL`` / ``OPS_BENCH_POSTGRES_URL``, else the local defaults.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pymysql
from sqlalchemy.engine import make_url

from durable_ops.storage import migrate

MARIADB_SERVER_URL = os.environ.get("OPS_BENCH_MARIADB_URL", "mysql+pymysql://root@127.0.0.1:3306/")
POSTGRES_SERVER_URL = os.environ.get(
    "OPS_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)


def mariadb_connect(url: str, *, autocommit: bool = False) -> pymysql.Connection[Any]:
    """A plain PyMySQL connection to the server (and database) of a SQLAlchemy URL."""
    parsed = make_url(url)
    return pymysql.connect(
        host=parsed.host or "127.0.0.1",
        port=parsed.port or 3306,
        user=parsed.username or "root",
        password=parsed.password or "",
        database=parsed.database or None,
        charset="utf8mb4",
        autocommit=autocommit,
    )


@contextmanager
def mariadb_database(*, migrated: bool = True) -> Iterator[str]:
    """A fresh ``bench_<random>`` database; yields its SQLAlchemy URL."""
    name = f"bench_{secrets.token_hex(6)}"
    admin = mariadb_connect(MARIADB_SERVER_URL, autocommit=True)
    try:
        with admin.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
        url = make_url(MARIADB_SERVER_URL).set(database=name).render_as_string(hide_password=False)
        try:
            if migrated:
                migrate.upgrade(url)
            yield url
        finally:
            admin.ping(reconnect=True)
            with admin.cursor() as cursor:
                cursor.execute(f"DROP DATABASE IF EXISTS {name}")
    finally:
        admin.close()


@contextmanager
def sqlite_database() -> Iterator[str]:
    """A migrated SQLite file in a temporary directory; yields its URL."""
    folder = Path(tempfile.mkdtemp(prefix="bench-sqlite-"))
    try:
        url = f"sqlite:///{folder / 'ops.sqlite3'}"
        migrate.upgrade(url)
        yield url
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def postgres_database() -> Iterator[str]:
    """A fresh, empty PostgreSQL database; yields its libpq connection URL."""
    import psycopg  # type: ignore[import-not-found,unused-ignore]

    name = f"bench_{secrets.token_hex(6)}"
    with psycopg.connect(POSTGRES_SERVER_URL, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        yield make_url(POSTGRES_SERVER_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(POSTGRES_SERVER_URL, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
