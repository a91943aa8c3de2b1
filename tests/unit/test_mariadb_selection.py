"""Where the tests' MariaDB comes from: the fixture's pure decision, row by row.

The integration suite runs one of these paths per session (CI: the container);
this keeps the others covered, the local server's in particular.
"""

from __future__ import annotations

import pytest

from tests.conftest import (
    DEFAULT_MARIADB_IMAGE,
    LOCAL_MARIADB_URL,
    DockerFinding,
    MariadbSettings,
    NoMariadb,
    StartContainer,
    UseServer,
    _one_line,
    ryuk_to_be_disabled,
    select_mariadb,
)

EXPLICIT = "mysql+pymysql://ops:pw@db.example:3306/"
BUILT = "durable-ops/mariadb:10.11-bookworm"
NO_ENGINE = DockerFinding(engine=False)
READY = DockerFinding(engine=True)
UNPULLABLE = DockerFinding(engine=True, image_problem="cannot pull mariadb:11.4 (no such host)")


def settings(**environ: str) -> MariadbSettings:
    return MariadbSettings.from_environ(environ)


def test_defaults_to_the_official_image_and_requires_nothing() -> None:
    assert settings() == MariadbSettings(
        explicit_url=None,
        image=DEFAULT_MARIADB_IMAGE,
        require_testcontainers=False,
        require_mariadb=False,
    )
    assert DEFAULT_MARIADB_IMAGE == "mariadb:11.4"


def test_reads_every_setting_and_treats_empty_as_unset() -> None:
    assert settings(
        OPS_TEST_MARIADB_URL=EXPLICIT,
        OPS_TEST_MARIADB_IMAGE=BUILT,
        OPS_REQUIRE_TESTCONTAINERS="1",
        OPS_REQUIRE_MARIADB="1",
    ) == MariadbSettings(EXPLICIT, BUILT, require_testcontainers=True, require_mariadb=True)
    assert settings(OPS_TEST_MARIADB_URL="", OPS_TEST_MARIADB_IMAGE="") == settings()
    assert not settings(OPS_REQUIRE_TESTCONTAINERS="true").require_testcontainers


def test_an_explicit_url_wins_and_docker_is_not_probed() -> None:
    chosen = settings(OPS_TEST_MARIADB_URL=EXPLICIT)
    assert not chosen.tries_testcontainers
    assert select_mariadb(chosen, None, local_answers=True) == UseServer(EXPLICIT)


def test_a_ready_engine_starts_the_chosen_image() -> None:
    assert settings().tries_testcontainers
    assert select_mariadb(settings(), READY, local_answers=True) == StartContainer(
        DEFAULT_MARIADB_IMAGE
    )
    built = settings(OPS_TEST_MARIADB_IMAGE=BUILT)
    assert select_mariadb(built, READY, local_answers=False) == StartContainer(BUILT)


def test_without_docker_the_local_server_is_used_quietly() -> None:
    assert select_mariadb(settings(), NO_ENGINE, local_answers=True) == UseServer(
        LOCAL_MARIADB_URL, note=None
    )


def test_an_engine_without_the_image_falls_back_to_the_local_server_in_one_line() -> None:
    chosen = select_mariadb(settings(), UNPULLABLE, local_answers=True)
    assert isinstance(chosen, UseServer)
    assert chosen.url == LOCAL_MARIADB_URL
    assert chosen.note == (
        "testcontainers: cannot pull mariadb:11.4 (no such host);"
        " using the MariaDB on 127.0.0.1:3306"
    )


@pytest.mark.parametrize(
    ("docker", "reason"),
    [(NO_ENGINE, "no Docker engine answers"), (UNPULLABLE, "cannot pull mariadb:11.4")],
)
def test_required_testcontainers_fail_rather_than_fall_back(
    docker: DockerFinding, reason: str
) -> None:
    required = settings(OPS_REQUIRE_TESTCONTAINERS="1", OPS_TEST_MARIADB_URL=EXPLICIT)
    assert required.tries_testcontainers
    chosen = select_mariadb(required, docker, local_answers=True)
    assert isinstance(chosen, NoMariadb)
    assert chosen.fail
    assert chosen.message.startswith(f"OPS_REQUIRE_TESTCONTAINERS=1, but {reason}")


def test_required_testcontainers_win_over_an_explicit_url() -> None:
    required = settings(OPS_REQUIRE_TESTCONTAINERS="1", OPS_TEST_MARIADB_URL=EXPLICIT)
    assert select_mariadb(required, READY, local_answers=True) == StartContainer(
        DEFAULT_MARIADB_IMAGE
    )


@pytest.mark.parametrize("require_mariadb", ["0", "1"])
def test_no_mariadb_at_all_skips_unless_required(require_mariadb: str) -> None:
    chosen = select_mariadb(
        settings(OPS_REQUIRE_MARIADB=require_mariadb), UNPULLABLE, local_answers=False
    )
    assert isinstance(chosen, NoMariadb)
    assert chosen.fail is (require_mariadb == "1")
    assert "cannot pull mariadb:11.4" in chosen.message
    assert "scripts/mariadb-image.sh" in chosen.message
    quiet = select_mariadb(settings(), NO_ENGINE, local_answers=False)
    assert isinstance(quiet, NoMariadb)
    assert quiet.message.startswith("no MariaDB: set OPS_TEST_MARIADB_URL")


@pytest.mark.parametrize(
    ("already_disabled", "ryuk_problem", "disable"),
    [
        (False, None, False),  # Ryuk can be had: keep it
        (False, "cannot pull testcontainers/ryuk:0.8.1 (no such host)", True),
        (True, "cannot pull testcontainers/ryuk:0.8.1 (no such host)", False),  # already off
        (True, None, False),
    ],
)
def test_ryuk_is_disabled_only_when_it_cannot_be_had(
    already_disabled: bool, ryuk_problem: str | None, disable: bool
) -> None:
    assert ryuk_to_be_disabled(already_disabled, ryuk_problem) is disable


def test_docker_errors_shrink_to_one_bounded_line() -> None:
    assert _one_line(RuntimeError("a\n  b\tc")) == "a b c"
    assert _one_line(RuntimeError()) == "RuntimeError"
    long = _one_line(RuntimeError("x" * 1000))
    assert len(long) == 240
    assert long.endswith("…")
