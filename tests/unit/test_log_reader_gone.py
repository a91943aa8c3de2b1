"""A log line whose reader is gone (a broken pipe) is dropped, never raised into the
code that logged."""

from __future__ import annotations

import logging
import os
import sys
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


@pytest.mark.parametrize("as_json", ["true", "false"])
def test_lines_to_a_pipe_nobody_reads_are_dropped(
    monkeypatch: pytest.MonkeyPatch, as_json: str
) -> None:
    read, write = os.pipe()
    os.close(read)  # as when `opsctl up` is killed: the child's stderr leads nowhere
    with open(write, "w", buffering=1) as broken:
        monkeypatch.setattr(sys, "stderr", broken)

        def report(_handler: logging.Handler, _record: logging.LogRecord) -> None:
            raise AssertionError("the library's line failed")

        monkeypatch.setattr(logging.Handler, "handleError", report)
        configure_logging(replace(Settings(), log_json=as_json), "operations")
        log = structlog.get_logger("test")
        log.info("operation_created", operation_id="op-1", say="created")
        log.warning("sweep_failed", error="OperationalError")  # and every later line
        logging.getLogger("grpc").warning("a library's line")
        broken.write("what print() sends there goes nowhere too\n")  # the same descriptor
