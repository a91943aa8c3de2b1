"""Settings come from OPS_* variables, are validated, and are all documented."""

from __future__ import annotations

from dataclasses import Field, fields
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from durable_ops.cli import GRPC_SERVICES
from durable_ops.model.bounds import LEASE_SECONDS_RANGE, MODEL_MAX, OLDER_THAN_MAX
from durable_ops.model.concurrency import FOLLOW_SERVER_SLOTS
from durable_ops.operations.tuning import Tuning
from durable_ops.settings import (
    MODEL_NAME_MAX,
    RETENTION_DAYS_MAX,
    WORKER_CONCURRENCY_RANGE,
    WORKER_LEASE_SECONDS_RANGE,
    Settings,
    SettingsError,
    documented_variables,
    service_variable,
    variable,
)

README = Path(__file__).resolve().parents[2] / "README.md"


def _readme_table() -> dict[str, tuple[str, str]]:
    """The Configuration table's rows: variable → (default, meaning), as written."""
    rows = [line.split(" | ") for line in README.read_text().splitlines()]
    return {
        row[0].removeprefix("| `").removesuffix("`"): (row[1], row[2].removesuffix(" |"))
        for row in rows
        if len(row) == 3 and row[0].startswith("| `OPS_")
    }


def _as_written(default: str) -> str:
    """A default as the table writes it: ``(empty)``, or as code (a boolean as `false`)."""
    if default == "":
        return "(empty)"
    return f"`{default.lower() if default in ('True', 'False') else default}`"


def test_the_readme_table_says_what_the_settings_say() -> None:
    """Each variable has its row, with its default and, word for word, its description."""
    written = {name: (_as_written(default), doc) for name, default, doc in documented_variables()}
    assert _readme_table() == written


def test_every_setting_has_a_description() -> None:
    assert [name for name, _default, doc in documented_variables() if not doc] == []


def test_every_served_target_has_its_address_variables_documented() -> None:
    documented = {name for name, _default, _doc in documented_variables()}
    wanted = [service_variable(service, "bind") for service in [*GRPC_SERVICES, "gateway"]]
    wanted += [service_variable(service, "target") for service in GRPC_SERVICES]
    assert service_variable("ai-admission", "bind") == "OPS_AI_ADMISSION_BIND"
    assert [name for name in wanted if name not in documented] == []


def test_values_are_parsed_by_type() -> None:
    settings = Settings.from_env(
        {
            "OPS_DEV_LOGIN": "true",
            "OPS_AI_USER_LIMIT": "5",
            "OPS_DATABASE_WAIT_SECONDS": "0.25",
            "OPS_DATABASE_URL": "mysql+pymysql://u@h/db",
        }
    )
    assert settings.dev_login is True
    assert settings.ai_user_limit == 5
    assert settings.database_wait_seconds == 0.25
    assert settings.database_url == "mysql+pymysql://u@h/db"
    assert settings.workers_ai_operations_enabled is False


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("OPS_DEV_LOGIN", "maybe"),
        ("OPS_AI_USER_LIMIT", "two"),
        ("OPS_WORKER_POLL_SECONDS", "x"),
        ("OPS_DEV_MODEL_SECONDS", "-1"),
        ("OPS_SERVICE_CREDENTIAL_MAX_AGE_SECONDS", "0"),
        ("OPS_SERVICE_CREDENTIAL_MAX_AGE_SECONDS", "a day"),
        ("OPS_DATABASE_WAIT_SECONDS", "-1"),
        ("OPS_DATABASE_WAIT_SECONDS", "nan"),
        ("OPS_DATABASE_WAIT_SECONDS", "inf"),
        ("OPS_DATABASE_WAIT_SECONDS", "a minute"),
        ("OPS_RETENTION_DAYS", "-1"),
        ("OPS_TOMBSTONE_RETENTION_DAYS", "0"),
        ("OPS_TOMBSTONE_RETENTION_DAYS", "99999"),
        ("OPS_GATEWAY_ALLOWED_HOSTS", "localhost:8080"),
        ("OPS_GATEWAY_ALLOWED_HOSTS", "*"),
        ("OPS_GATEWAY_ALLOWED_HOSTS", "https://ops.example.com"),
        ("OPS_GATEWAY_TRUSTED_PROXIES", "*"),
        ("OPS_GATEWAY_TRUSTED_PROXIES", "proxy.internal"),
        ("OPS_GATEWAY_TRUSTED_PROXIES", "10.0.0.0/33"),
        ("OPS_LOG_LEVEL", "bogus"),
        ("OPS_LOG_LEVEL", "critical"),
        ("OPS_AI_USER_LIMIT", "-1"),
        ("OPS_AI_USER_LIMIT", "0"),
        ("OPS_AI_GLOBAL_LIMIT", "0"),
        ("OPS_DEV_MODEL_SECONDS", "nan"),
        ("OPS_UI_UNREAD_POLL_MS", "0"),
        ("OPS_UI_UNREAD_POLL_MS", "999"),
        ("OPS_UI_UNREAD_POLL_MS", "86400001"),
        ("OPS_WORKER_LEASE_SECONDS", "0"),
        ("OPS_WORKER_CONCURRENCY", "99"),
        ("OPS_AI_CIRCUIT_FAILURES", "0"),
        ("OPS_AI_CIRCUIT_COOLDOWN_SECONDS", "inf"),
        ("OPS_WORKER_TASK_TIMEOUT_SECONDS", "nan"),
    ],
)
def test_bad_values_are_refused_with_the_variable_named(name: str, value: str) -> None:
    with pytest.raises(SettingsError, match=name):
        Settings.from_env({name: value})


def test_the_ai_limits_refusal_says_the_range_and_the_value() -> None:
    with pytest.raises(SettingsError) as refused:
        Settings.from_env({"OPS_AI_USER_LIMIT": "-1"})
    assert str(refused.value) == "OPS_AI_USER_LIMIT must be at least 1, not -1"


NUMBERS = [each for each in fields(Settings) if each.type in ("int", "float")]


@pytest.mark.parametrize("setting", NUMBERS, ids=[each.name for each in NUMBERS])
def test_every_number_has_a_range_and_a_refusal_names_its_variable(setting: Field[Any]) -> None:
    """No number is taken as it comes: each refuses -1 (all of them start at 0 or above),
    and a number of seconds refuses NaN and infinity, which would never come or end."""
    name = variable(setting.name)
    refused = ["-1", "nan", "inf", "-inf"] if setting.type == "float" else ["-1"]
    for raw in refused:
        with pytest.raises(SettingsError, match=f"^{name} "):
            Settings.from_env({name: raw})


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("OPS_AI_USER_LIMIT", "1"),
        ("OPS_UI_UNREAD_POLL_MS", "1000"),
        ("OPS_UI_UNREAD_POLL_MS", "86400000"),
        ("OPS_WORKER_LEASE_SECONDS", "5"),
        ("OPS_WORKER_LEASE_SECONDS", "600"),
        ("OPS_WORKER_CONCURRENCY", "0"),
        ("OPS_WORKER_CONCURRENCY", "64"),
        ("OPS_AI_CIRCUIT_COOLDOWN_SECONDS", "0"),
        ("OPS_DEV_MODEL_SECONDS", "0"),
    ],
)
def test_the_ends_of_each_range_are_accepted(name: str, value: str) -> None:
    Settings.from_env({name: value})


def test_the_worker_bounds_are_the_products() -> None:
    assert WORKER_LEASE_SECONDS_RANGE == LEASE_SECONDS_RANGE  # what a claim may ask for
    assert MODEL_NAME_MAX == MODEL_MAX  # the provenance column
    assert WORKER_CONCURRENCY_RANGE[0] == FOLLOW_SERVER_SLOTS


def test_the_database_wait_is_a_minute_unless_set_and_zero_asks_once() -> None:
    assert Settings.from_env({}).database_wait_seconds == 60.0
    assert Settings.from_env({"OPS_DATABASE_WAIT_SECONDS": "0"}).database_wait_seconds == 0.0
    assert Settings.from_env({"OPS_DATABASE_WAIT_SECONDS": "2.5"}).database_wait_seconds == 2.5


def test_retention_is_off_unless_set_and_tombstones_outlive_operations() -> None:
    assert Settings().retention_days == 0
    assert Settings.from_env({"OPS_RETENTION_DAYS": "30"}).tombstone_retention_days == 400
    with pytest.raises(SettingsError, match="OPS_TOMBSTONE_RETENTION_DAYS"):
        Settings.from_env({"OPS_RETENTION_DAYS": "30", "OPS_TOMBSTONE_RETENTION_DAYS": "7"})


def test_the_retention_bound_is_the_operators_bound() -> None:
    assert timedelta(days=RETENTION_DAYS_MAX) == OLDER_THAN_MAX


@pytest.mark.parametrize("name", [each.name for each in fields(Tuning) if each.type != "bool"])
def test_a_tuning_interval_of_zero_is_refused_rather_than_spun_on(name: str) -> None:
    with pytest.raises(ValueError, match=name):
        Tuning(**{name: 0.0})  # type: ignore[arg-type]
