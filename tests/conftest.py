"""Shared fixtures: real databases on both engines, never mocks.

MariaDB, in this order (``select_mariadb`` decides, from what the probes found):

1. ``OPS_TEST_MARIADB_URL`` when set (a server URL; the user must be able to
   create databases);
2. else a testcontainers container of ``OPS_TEST_MARIADB_IMAGE`` (default the
   official ``mariadb:11.4``; ``scripts/mariadb-image.sh`` builds one offline)
   when a Docker engine answers and has or can pull the image;
3. else the server on 127.0.0.1:3306 (root, empty password). When Docker
   answered but the container could not be had, one line says why.

``OPS_REQUIRE_TESTCONTAINERS=1`` (set by ``.ci/run``) makes step 2 the only one:
anything short of a running container fails. ``OPS_REQUIRE_MARIADB=1`` turns
"no MariaDB" into a failure instead of a skip. Each session works in its own
throwaway databases, created as root. The Ryuk reaper is disabled when its image
cannot be had (``TESTCONTAINERS_RYUK_DISABLED`` set by the caller wins); the
fixture stops its container itself either way.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import shutil
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pymysql
import pytest
from hypothesis import settings
from pymysql.constants import CLIENT
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import make_url

from durable_ops.storage import migrate
from durable_ops.storage.db import Database
from durable_ops.storage.schema import Base
from tests.support.figures import figures_in
from tests.support.logging_reset import reset_logging

if TYPE_CHECKING:
    from testcontainers.community.mysql import MySqlContainer

# No per-example deadline: how fast a property runs is a benchmark's question, and on two
# cores shared by two test workers an example's time says more about the machine.
settings.register_profile("shared_cores", deadline=None)
settings.load_profile("shared_cores")

ENGINES = ["sqlite", "mariadb"]
CHECKOUT_VAR = Path(__file__).resolve().parents[1] / "var"
MakeDatabase = Callable[[], str]
MigratedSqlite = Callable[[Path], str]
EmptyDatabase = Callable[[], str]

DEFAULT_MARIADB_IMAGE = "mariadb:11.4"
LOCAL_MARIADB_URL = "mysql+pymysql://root@127.0.0.1:3306/"
_PULL_TIMEOUT_S = 600


@dataclass(frozen=True)
class MariadbSettings:
    """The environment's say in where MariaDB comes from."""

    explicit_url: str | None
    image: str
    require_testcontainers: bool
    require_mariadb: bool

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> MariadbSettings:
        return cls(
            explicit_url=environ.get("OPS_TEST_MARIADB_URL") or None,
            image=environ.get("OPS_TEST_MARIADB_IMAGE") or DEFAULT_MARIADB_IMAGE,
            require_testcontainers=environ.get("OPS_REQUIRE_TESTCONTAINERS") == "1",
            require_mariadb=environ.get("OPS_REQUIRE_MARIADB") == "1",
        )

    @property
    def tries_testcontainers(self) -> bool:
        """Whether Docker is worth probing at all (an explicit URL wins unless required)."""
        return self.require_testcontainers or self.explicit_url is None


@dataclass(frozen=True)
class DockerFinding:
    """What probing Docker found: an engine that answers, and why the image cannot be had."""

    engine: bool
    image_problem: str | None = None

    @property
    def ready(self) -> bool:
        return self.engine and self.image_problem is None


@dataclass(frozen=True)
class UseServer:
    url: str
    note: str | None = None  # the one line to print: why not a container


@dataclass(frozen=True)
class StartContainer:
    image: str


@dataclass(frozen=True)
class NoMariadb:
    message: str
    fail: bool  # else skip


MariadbChoice = UseServer | StartContainer | NoMariadb


def select_mariadb(
    settings: MariadbSettings, docker: DockerFinding | None, local_answers: bool
) -> MariadbChoice:
    """Where this session's MariaDB comes from. Pure: the probes ran before.

    ``docker`` is None when it was not probed (``settings.tries_testcontainers``
    false); ``local_answers`` says whether the server on 127.0.0.1:3306 answered.
    """
    if docker is None:
        problem = "Docker was not probed"
    else:
        problem = docker.image_problem or ("" if docker.engine else "no Docker engine answers")
    if settings.require_testcontainers:
        if docker is not None and docker.ready:
            return StartContainer(settings.image)
        return NoMariadb(f"OPS_REQUIRE_TESTCONTAINERS=1, but {problem}", fail=True)
    if settings.explicit_url:
        return UseServer(settings.explicit_url)
    if docker is not None and docker.ready:
        return StartContainer(settings.image)
    # Only an engine that answered deserves a word: no Docker at all is the quiet default.
    said = docker is not None and docker.engine
    if local_answers:
        note = f"testcontainers: {problem}; using the MariaDB on 127.0.0.1:3306" if said else None
        return UseServer(LOCAL_MARIADB_URL, note)
    reason = f"{problem}; " if said else ""
    return NoMariadb(
        f"no MariaDB: {reason}set OPS_TEST_MARIADB_URL, run Docker"
        " (scripts/mariadb-image.sh builds an image offline), or start one on 127.0.0.1:3306",
        fail=settings.require_mariadb,
    )


def ryuk_to_be_disabled(already_disabled: bool, ryuk_problem: str | None) -> bool:
    """Disable the Ryuk reaper when its image cannot be had; the fixture stops its container."""
    return not already_disabled and ryuk_problem is not None


def _one_line(exc: BaseException, limit: int = 240) -> str:
    detail = " ".join(str(getattr(exc, "explanation", None) or exc).split()) or type(exc).__name__
    return detail if len(detail) <= limit else detail[: limit - 1] + "…"


def _image_problem(client: Any, image: str) -> str | None:
    """None when the engine has ``image`` or can pull it, else why not (one line)."""
    import docker

    try:
        client.images.get(image)
        return None
    except docker.errors.ImageNotFound:
        pass
    except docker.errors.DockerException as exc:
        return f"cannot inspect {image} ({_one_line(exc)})"
    try:
        # A pull streams for a while: not on the probe's 2 s client.
        docker.from_env(timeout=_PULL_TIMEOUT_S).images.pull(image)
        return None
    except docker.errors.DockerException as exc:
        return f"cannot pull {image} ({_one_line(exc)})"


def _docker_client() -> Any | None:
    try:
        import docker

        client = docker.from_env(timeout=2)
        client.ping()
        return client
    except Exception:
        return None


def _probe_docker(image: str) -> DockerFinding:
    client = _docker_client()
    if client is None:
        return DockerFinding(engine=False)
    try:
        return DockerFinding(engine=True, image_problem=_image_problem(client, image))
    finally:
        client.close()


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


def _start_container(image: str) -> MySqlContainer:
    """A started MariaDB container whose root user the tests use (they create databases)."""
    from testcontainers.community.mysql import MySqlContainer
    from testcontainers.core.config import testcontainers_config

    if not testcontainers_config.ryuk_disabled:
        client = _docker_client()
        ryuk_problem = (
            "no Docker engine answers"
            if client is None
            else _image_problem(client, testcontainers_config.ryuk_image)
        )
        if client is not None:
            client.close()
        if ryuk_to_be_disabled(testcontainers_config.ryuk_disabled, ryuk_problem):
            testcontainers_config.ryuk_disabled = True
    container = MySqlContainer(
        image, dialect="pymysql", username="root", password=secrets.token_hex(8), dbname="test"
    )
    try:
        return container.start()
    except BaseException:
        container.stop()  # start() leaves a container that never became ready running
        raise


def _say(config: pytest.Config, line: str) -> None:
    """One line on the terminal, past output capturing."""
    capture = config.pluginmanager.getplugin("capturemanager")
    reporter = config.pluginmanager.getplugin("terminalreporter")
    if capture is None or reporter is None:
        print(line, file=sys.stderr)
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line(line)


@pytest.fixture(scope="session")
def mariadb_server_url(pytestconfig: pytest.Config) -> Iterator[str]:
    """A URL of a MariaDB server (no database selected) whose user may create databases."""
    settings = MariadbSettings.from_environ(os.environ)
    docker = _probe_docker(settings.image) if settings.tries_testcontainers else None
    local_answers = _server_answers(LOCAL_MARIADB_URL)
    choice = select_mariadb(settings, docker, local_answers)
    if isinstance(choice, StartContainer):
        try:
            container = _start_container(choice.image)
        except Exception as exc:
            if settings.require_testcontainers:
                raise
            problem = f"{choice.image} did not start ({_one_line(exc)})"
            choice = select_mariadb(settings, DockerFinding(True, problem), local_answers)
        else:
            try:
                url = make_url(container.get_connection_url()).set(database=None)
                yield url.render_as_string(hide_password=False)
            finally:
                container.stop()
            return
    if isinstance(choice, UseServer):
        if choice.note:
            _say(pytestconfig, choice.note)
        yield choice.url
        return
    assert isinstance(choice, NoMariadb)  # a fallback never starts a container
    if choice.fail:
        pytest.fail(choice.message)
    pytest.skip(choice.message)


def _admin(url: str, *, multi_statements: bool = False) -> pymysql.connections.Connection:
    parsed = make_url(url)
    return pymysql.connect(
        host=parsed.host or "127.0.0.1",
        port=parsed.port or 3306,
        user=parsed.username or "root",
        password=parsed.password or "",
        database=parsed.database,
        autocommit=True,
        client_flag=CLIENT.MULTI_STATEMENTS if multi_statements else 0,
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


@pytest.fixture(scope="session")
def copy_of_migrated_mariadb(
    mariadb_server_url: str, make_mariadb_database: MakeDatabase
) -> MakeDatabase:
    """A new database at head of its own: the tables and rows of one the process migrated
    once, made again in one round trip. The migrations' DDL takes 4-10 s a database on
    MariaDB (test_migrations runs them); a copy a fraction of a second."""
    template: list[tuple[str, list[str], list[str]]] = []  # its name, tables, CREATE TABLEs

    def made_once() -> tuple[str, list[str], list[str]]:
        if not template:
            url = make_mariadb_database()
            migrate.upgrade(url)
            name = str(make_url(url).database)
            with _admin(url) as connection, connection.cursor() as cursor:
                cursor.execute("SHOW TABLES")
                tables = [str(row[0]) for row in cursor.fetchall()]
                creates = []
                for table in tables:
                    cursor.execute(f"SHOW CREATE TABLE `{table}`")
                    (_, create) = cursor.fetchone() or ("", "")
                    creates.append(re.sub(r" AUTO_INCREMENT=\d+", "", create))
            template.append((name, tables, creates))
        return template[0]

    def copy() -> str:
        name, tables, creates = made_once()
        url = make_mariadb_database()
        into = make_url(url).database
        # Names the server listed and make_mariadb_database made, none a test's input.
        filled = [f"INSERT INTO `{into}`.`{t}` SELECT * FROM `{name}`.`{t}`" for t in tables]  # noqa: S608
        with _admin(url, multi_statements=True) as connection, connection.cursor() as cursor:
            cursor.execute(";".join(["SET FOREIGN_KEY_CHECKS=0", *creates, *filled]))
            while cursor.nextset():
                pass
        return url

    return copy


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> MigratedSqlite:
    """Put a SQLite database at head at a path and return its URL: a copy of one the process
    migrated once. Some 900 tests each want a fresh one, and ``migrate.upgrade`` of a new
    file takes 0.3 s (test_migrations runs the migrations themselves)."""
    template: list[Path] = []

    def copy(path: Path) -> str:
        if not template:
            head = tmp_path_factory.mktemp("head") / "head.sqlite3"
            migrate.upgrade(f"sqlite:///{head}")
            template.append(head)
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(template[0], path)  # with its mode: the file is private (0600)
        return f"sqlite:///{path}"

    return copy


@pytest.fixture(scope="session")
def empty_mariadb(migrated_mariadb_url: str) -> Iterator[EmptyDatabase]:
    """Empty every table of the session's migrated database and return its URL: one round
    trip on a connection kept open (an engine opened for each test took 50 ms of the 685
    tests that ask)."""
    emptying = [
        table.update().values(ai_enabled=True)
        if table.name == "ai_admission_control"
        else table.delete()
        for table in reversed(Base.metadata.sorted_tables)
    ]
    literal = {"literal_binds": True}
    statements = ";".join(
        str(s.compile(dialect=mysql.dialect(), compile_kwargs=literal)) for s in emptying
    )
    held = [_admin(migrated_mariadb_url, multi_statements=True)]

    def run() -> None:
        with held[0].cursor() as cursor:
            cursor.execute(statements)
            while cursor.nextset():
                pass

    def empty() -> str:
        try:
            run()
        except pymysql.err.Error:  # a test may have killed the server's connections
            held[0] = _admin(migrated_mariadb_url, multi_statements=True)
            run()
        return migrated_mariadb_url

    yield empty
    held[0].close()


@pytest.fixture(params=ENGINES)
def engine_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def db_url(engine_name: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A migrated, empty database URL on the parametrised engine."""
    if engine_name == "sqlite":
        migrated_sqlite: MigratedSqlite = request.getfixturevalue("migrated_sqlite")
        return migrated_sqlite(tmp_path / "ops.sqlite3")
    emptied: EmptyDatabase = request.getfixturevalue("empty_mariadb")
    return emptied()


@pytest.fixture
def database(db_url: str) -> Iterator[Database]:
    db = Database(db_url)
    yield db
    db.dispose()


@pytest.fixture(autouse=True)
def logging_left_as_found() -> Iterator[None]:
    """A command run in-process (``cli.main``) configures logging for its process, onto the
    stderr pytest captured for that test and closes after it: later tests would log to a
    closed file. Undone after any test that configured it."""
    yield
    if any(handler.get_name() == "durable-ops" for handler in logging.getLogger().handlers):
        reset_logging()


@pytest.fixture(scope="session", autouse=True)
def nothing_kept_in_the_checkout() -> Iterator[None]:
    """No test may leave secrets or databases in the checkout's var/ (each uses its own cwd)."""
    before = set(CHECKOUT_VAR.glob("*")) if CHECKOUT_VAR.exists() else set()
    yield
    after = set(CHECKOUT_VAR.glob("*")) if CHECKOUT_VAR.exists() else set()
    assert after <= before, f"a test wrote into the checkout: {sorted(map(str, after - before))}"


_FIGURES: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Keep the figures a test reported (``tests.support.figures.report``), pass or fail."""
    if report.when == "call":
        _FIGURES.extend(f"{report.nodeid}: {line}" for line in figures_in(report.capstdout))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _FIGURES:
        terminalreporter.section("figures")
        for line in _FIGURES:
            terminalreporter.write_line(line)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest files first, so that the others fill in around them: the partition
    tests (about 170 s, a Galera cluster in network namespaces), then every file marked
    ``slow`` (the soak alone takes 145 s). Collected in their places, a soak or a cluster
    taken last left one process running it alone for a minute or two at the end of a CI
    run. A stable sort: every other test keeps its place, each file stays whole."""
    items.sort(
        key=lambda item: (
            not item.nodeid.startswith("tests/partition/"),
            item.get_closest_marker("slow") is None,
        )
    )
