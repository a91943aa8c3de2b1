"""A MariaDB server of one test's own, to stop, kill and start at will (outage drills).

Its datadir lives in a temporary folder and it listens on a free loopback
port; root has no password. ``mariadb-install-db`` and ``mariadbd`` must be
installed (Debian's ``mariadb-server``): without them ``needs_binaries`` skips,
or fails under ``OPS_REQUIRE_MARIADB=1``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pymysql
import pytest

from tests.support.ports import free_port

START_SECONDS = 60.0
# Small: the server only needs to hold a few tables.
SERVER_OPTIONS = (
    "--innodb-log-file-size=8M",
    "--innodb-buffer-pool-size=16M",
    "--skip-log-bin",
    "--skip-name-resolve",
    "--max-connections=300",  # a drill's stack holds many pools
)


def needs_binaries() -> None:
    missing = [name for name in ("mariadb-install-db", "mariadbd") if shutil.which(name) is None]
    if missing:
        message = f"{' and '.join(missing)} not installed (apt-get install mariadb-server)"
        if os.environ.get("OPS_REQUIRE_MARIADB") == "1":
            pytest.fail(message)
        pytest.skip(message)


@dataclass
class ThrowawayMariadb:
    base: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    def url(self, database: str = "") -> str:
        return f"mysql+pymysql://root@127.0.0.1:{self.port}/{database}"

    def install(self) -> None:
        subprocess.run(
            [
                "mariadb-install-db",
                "--no-defaults",
                f"--datadir={self.base / 'data'}",
                "--user=root",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                *SERVER_OPTIONS[:2],
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def start(self, timeout: float = START_SECONDS) -> float:
        """Start on the same datadir and port (unless running); the seconds until it answered."""
        if self.process is not None and self.process.poll() is None:
            return 0.0
        began = time.monotonic()
        self.process = subprocess.Popen(
            [
                shutil.which("mariadbd") or "mariadbd",
                "--no-defaults",
                f"--datadir={self.base / 'data'}",
                "--user=root",
                f"--port={self.port}",
                "--bind-address=127.0.0.1",
                f"--socket={self.base / 'sock'}",
                f"--pid-file={self.base / 'pid'}",
                f"--log-error={self.base / 'error.log'}",
                *SERVER_OPTIONS,
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = began + timeout
        while not self.answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"mariadbd did not start:\n{self.log()}")
            time.sleep(0.05)
        return time.monotonic() - began

    def log(self, limit: int = 2000) -> str:
        path = self.base / "error.log"
        return path.read_text(errors="replace")[-limit:] if path.exists() else ""

    def answers(self) -> bool:
        try:
            pymysql.connect(
                host="127.0.0.1", port=self.port, user="root", connect_timeout=1
            ).close()
        except pymysql.MySQLError:
            return False
        return True

    def execute(self, statement: str) -> None:
        connection = pymysql.connect(host="127.0.0.1", port=self.port, user="root", autocommit=True)
        try:
            with connection.cursor() as cursor:
                cursor.execute(statement)
        finally:
            connection.close()

    def create_database(self, name: str) -> str:
        """A new database of that name; its URL."""
        self.execute(f"CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
        return self.url(name)

    def kill(self) -> None:
        """SIGKILL, as a crash or the OOM killer would."""
        assert self.process is not None
        self.process.kill()
        self.process.wait(30)

    def stop(self) -> None:
        """A clean shutdown (SIGTERM), as an operator's restart does; SIGKILL after 30 s."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@contextmanager
def throwaway_mariadb() -> Iterator[ThrowawayMariadb]:
    """An installed, stopped server; stopped and deleted at the end.

    Its folder is a short path of its own: a Unix socket path must fit in 108 bytes.
    """
    needs_binaries()
    base = Path(tempfile.mkdtemp(prefix="ops-mariadb-"))
    server = ThrowawayMariadb(base)
    try:
        server.install()
        yield server
    finally:
        server.stop()
        with contextlib.suppress(OSError):
            shutil.rmtree(base)
