"""On a terminal an event's ``say`` is the whole line; JSON keeps the event as it was."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace

import pytest
import structlog

from durable_ops.logs import configure_logging
from durable_ops.settings import Settings
from tests.support.logging_reset import reset_logging


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    yield
    reset_logging()


def _line(capsys: pytest.CaptureFixture[str], as_json: bool, level: str = "info") -> str:
    settings = replace(Settings(), log_json="true" if as_json else "false")
    configure_logging(settings, "operations")
    log = structlog.get_logger("test")
    getattr(log, level)("grpc_serving", bind="127.0.0.1:50051", say="ready on 127.0.0.1:50051")
    return capsys.readouterr().err.strip()


def test_on_a_terminal_an_info_event_with_a_sentence_is_the_sentence_alone(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert _line(capsys, as_json=False) == "ready on 127.0.0.1:50051"


def test_a_warning_keeps_its_level_and_fields_on_a_terminal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    line = _line(capsys, as_json=False, level="warning")
    assert "grpc_serving" in line
    assert "warning" in line
    assert "127.0.0.1:50051" in line


def test_json_keeps_the_event_and_its_fields_without_the_sentence(
    capsys: pytest.CaptureFixture[str],
) -> None:
    record = json.loads(_line(capsys, as_json=True))
    assert (record["event"], record["bind"], record["process"]) == (
        "grpc_serving",
        "127.0.0.1:50051",
        "operations",
    )
    assert "say" not in record


def test_a_service_sharing_the_process_names_itself_in_its_sentence(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging(replace(Settings(), log_json="false"), "services")
    log = structlog.get_logger("test")
    log.info("grpc_serving", say="ready on 127.0.0.1:50051")  # the process itself
    with structlog.contextvars.bound_contextvars(process="operations"):
        log.info("grpc_serving", say="ready on 127.0.0.1:50051")
    assert capsys.readouterr().err.splitlines() == [
        "ready on 127.0.0.1:50051",
        "operations ready on 127.0.0.1:50051",
    ]
