"""Logging for every process: structlog, one event per line on stderr.

JSON when stderr is not a TTY (or ``OPS_LOG_JSON=true``), a console renderer
otherwise. On the console an info event that carries ``say`` (a short sentence
for people: "ready on 127.0.0.1:50051") is that sentence alone, so a start or a
stop reads as a few plain lines (led by the service's name when several share
the process: "operations ready on …"); JSON keeps the event and its fields as they
were, without the sentence. Library loggers (grpc, uvicorn, sqlalchemy) go through the same
renderer at WARNING so one process never mixes two formats. Events name
``operation_id`` and ``owner``, never raw user content. While a span is active
(tracing on, see ``durable_ops.telemetry``) every event carries its ``trace_id``
and ``span_id``, in the hex form trace viewers show.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO, cast

import structlog
from opentelemetry import trace
from structlog.typing import EventDict, Processor, WrappedLogger

from durable_ops.settings import Settings, SettingsError

SAY = "say"  # an event's sentence for people, shown alone on the console
LIBRARY_LOGGERS = ("grpc", "uvicorn", "uvicorn.error", "uvicorn.access", "sqlalchemy", "alembic")
_HANDLER_NAME = "durable-ops"


@dataclass
class FailureRun:
    """A run of failures of one thing (the sweeper's sweeps, a backend's calls), as an
    operator reads it: a line as it begins and a line as it ends, not a line a failure (a
    90 s database outage once wrote 86)."""

    clock: Callable[[], float] = time.monotonic
    since: float | None = None
    failures: int = 0

    def failed(self) -> bool:
        """Count a failure; True for the first of a run: the one to log."""
        self.failures += 1
        if self.since is not None:
            return False
        self.since = self.clock()
        return True

    def ended(self) -> tuple[float, int] | None:
        """At the first success after a run: its seconds and failures (then it is over);
        None when no run was on."""
        if self.since is None:
            return None
        run = (round(self.clock() - self.since, 1), self.failures)
        self.since, self.failures = None, 0
        return run


def _level(raw: str) -> int:
    """OPS_LOG_LEVEL's number; ``Settings`` has refused any other name than its four."""
    return logging.getLevelNamesMapping()[raw.strip().upper()]


def use_json(raw: str, *, is_tty: bool) -> bool:
    lowered = raw.strip().lower()
    if lowered in {"", "auto"}:
        return not is_tty
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise SettingsError(f"OPS_LOG_JSON must be auto, true or false, not {raw!r}")


def _add_process(process: str) -> Processor:
    def add(_logger: WrappedLogger, _method: str, event_dict: EventDict) -> EventDict:
        event_dict.setdefault("process", process)
        return event_dict

    return add


def add_trace_ids(_logger: WrappedLogger, _method: str, event_dict: EventDict) -> EventDict:
    """``trace_id``/``span_id`` of the active span; nothing without one (tracing off)."""
    span_context = trace.get_current_span().get_span_context()
    if span_context.is_valid:
        event_dict.setdefault("trace_id", trace.format_trace_id(span_context.trace_id))
        event_dict.setdefault("span_id", trace.format_span_id(span_context.span_id))
    return event_dict


def _drop_say(_logger: WrappedLogger, _method: str, event_dict: EventDict) -> EventDict:
    event_dict.pop(SAY, None)
    return event_dict


def _saying(renderer: Processor, process: str) -> Processor:
    """``renderer``, except that an info (or debug) event with ``say`` is just that,
    named when a part of the process said it (a service among several in one)."""

    def render(logger: WrappedLogger, method: str, event_dict: EventDict) -> str | bytes:
        said = event_dict.pop(SAY, None)
        if said is not None and event_dict.get("level") in ("info", "debug"):
            part = event_dict.get("process", process)
            return str(said) if part == process else f"{part} {said}"
        rendered: str | bytes = renderer(logger, method, event_dict)  # type: ignore[assignment]
        return rendered

    return render


class _DroppedWhenBroken:
    """A log stream whose lines are dropped once its reader is gone.

    The log is a side channel: when its reader has left (the pipe to ``opsctl up``, killed,
    or a ``| head`` that exited) a line has nowhere to go, and the BrokenPipeError of its
    write would land in whatever logged: a request that had committed answered UNKNOWN,
    the sweeper's loop ended. Dropping the lines is the simplest behaviour that keeps the
    work right. Stopping is not the log's call: a child of ``opsctl up`` stops on its
    parent-death signal (``stack.children``), with its usual graceful stop, and a process
    run by hand serves on as it would with its log sent to /dev/null. That is where the
    stream's descriptor goes at the first broken write, as ``cli.main`` does for stdout:
    the pipe stays broken, so every later line (and what the stream still buffers, which
    the interpreter flushes at exit) is written there without an error.
    """

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except BrokenPipeError:
            self._to_nothing()
            return len(text)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except BrokenPipeError:
            self._to_nothing()

    def _to_nothing(self) -> None:
        with contextlib.suppress(OSError, ValueError):  # no descriptor: nothing to move
            nothing = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(nothing, self.stream.fileno())
            finally:
                os.close(nothing)


def configure_logging(settings: Settings, process: str, *, final: bool = False) -> None:
    """Configure structlog and stdlib logging; calling it again replaces the setup.

    ``final``: this process never configures logging again (a server run by the
    CLI), so each logger is built once, at its first event, instead of at every
    event; a later ``configure`` (or ``capture_logs``) would not reach it.
    """
    level = _level(settings.log_level)
    json = use_json(settings.log_json, is_tty=sys.stderr.isatty())
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _add_process(process),
        add_trace_ids,
    ]
    renderer: Processor
    if json:
        # format_exc_info keeps a traceback inside the one JSON line.
        shared.extend([structlog.processors.format_exc_info, _drop_say])
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = _saying(structlog.dev.ConsoleRenderer(colors=True), process)

    stream = _DroppedWhenBroken(sys.stderr)
    structlog.configure(
        processors=[*shared, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        # PrintLogger's print() needs write and flush only; its annotation says TextIO.
        logger_factory=structlog.PrintLoggerFactory(file=cast(TextIO, stream)),
        cache_logger_on_first_use=final,
    )
    _route_stdlib(shared, renderer, level, stream)


def _route_stdlib(
    shared: list[Processor], renderer: Processor, level: int, stream: _DroppedWhenBroken
) -> None:
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[structlog.stdlib.add_logger_name, *shared],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
    )
    handler = logging.StreamHandler(stream)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(max(level, logging.WARNING))
    for name in LIBRARY_LOGGERS:
        library = logging.getLogger(name)
        # Libraries that install their own handlers would print a second format.
        library.handlers.clear()
        library.propagate = True
        library.setLevel(max(level, logging.WARNING))
