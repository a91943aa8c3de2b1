"""The domain error <-> gRPC status table, the servicer decorator, and the log it writes."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import pytest
import structlog

from durable_ops.logs import configure_logging, use_json
from durable_ops.model.errors import (
    CapacityExceeded,
    Conflict,
    DomainError,
    InUse,
    InvalidArgument,
    InvalidTransition,
    LeaseLost,
    NotFound,
    PermissionDenied,
    Unauthenticated,
    Unavailable,
)
from durable_ops.rpc.errors import (
    domain_error_from_rpc,
    status_for,
    trailing_metadata_for,
    translated,
)
from durable_ops.settings import Settings, SettingsError
from tests.support.logging_reset import reset_logging

SC = grpc.StatusCode

EXPECTED = [
    (InvalidArgument("task_type", "is required"), SC.INVALID_ARGUMENT),
    (Unauthenticated("no credential"), SC.UNAUTHENTICATED),
    (PermissionDenied("not entitled", code="not_entitled"), SC.PERMISSION_DENIED),
    (NotFound("no such operation"), SC.NOT_FOUND),
    (Conflict("key reused"), SC.ALREADY_EXISTS),
    (InvalidTransition("already terminal"), SC.FAILED_PRECONDITION),
    (InUse("an analysis uses it", operation_id="f" * 32), SC.FAILED_PRECONDITION),
    (LeaseLost("lease taken over"), SC.ABORTED),
    (CapacityExceeded("too many", retry_after_seconds=7), SC.RESOURCE_EXHAUSTED),
    (Unavailable("AI is off", code="ai_disabled"), SC.UNAVAILABLE),
]


class FakeContext:
    def __init__(self) -> None:
        self.aborted: tuple[Any, str, tuple[tuple[str, str], ...]] | None = None

    async def abort(self, code: Any, details: str = "", trailing_metadata: Any = ()) -> None:
        self.aborted = (code, details, tuple(trailing_metadata))
        raise grpc.aio.AbortError()


@pytest.mark.parametrize(("error", "status"), EXPECTED, ids=lambda v: type(v).__name__)
def test_each_kind_maps_to_its_status(error: DomainError, status: Any) -> None:
    assert status_for(error) == status
    assert dict(trailing_metadata_for(error))["x-error-code"] == error.code


def test_an_unknown_kind_is_internal() -> None:
    assert status_for(DomainError("boom")) == SC.INTERNAL


def test_field_and_retry_after_travel_in_trailers() -> None:
    invalid = dict(trailing_metadata_for(InvalidArgument("deadline", "too far")))
    assert (invalid["x-error-field"], invalid["x-error-reason"]) == ("deadline", "too far")
    trailers = dict(trailing_metadata_for(CapacityExceeded("busy", retry_after_seconds=12)))
    assert trailers["x-retry-after"] == "12"
    assert trailers["x-error-code"] == "capacity_exceeded"


def _aio_error(error: DomainError) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(
        status_for(error),
        grpc.aio.Metadata(),
        grpc.aio.Metadata(*trailing_metadata_for(error)),
        details=error.message,
    )


@pytest.mark.parametrize(("error", "status"), EXPECTED, ids=lambda v: type(v).__name__)
def test_clients_rebuild_the_same_typed_error(error: DomainError, status: Any) -> None:
    rebuilt = domain_error_from_rpc(_aio_error(error))
    assert type(rebuilt) is type(error)
    assert (rebuilt.kind, rebuilt.code, rebuilt.message) == (error.kind, error.code, error.message)


def test_rebuilt_errors_keep_field_and_retry_after() -> None:
    invalid = domain_error_from_rpc(_aio_error(InvalidArgument("page_size", "must be 1-100")))
    assert isinstance(invalid, InvalidArgument)
    assert (invalid.field, invalid.reason) == ("page_size", "must be 1-100")
    assert invalid.message == "page_size: must be 1-100"
    busy = domain_error_from_rpc(_aio_error(CapacityExceeded("busy", retry_after_seconds=9)))
    assert isinstance(busy, CapacityExceeded)
    assert busy.retry_after_seconds == 9
    in_use = domain_error_from_rpc(_aio_error(InUse("used", operation_id="0" * 32)))
    assert isinstance(in_use, InUse)
    assert (in_use.code, in_use.operation_id) == ("analysis_active", "0" * 32)


def test_a_refusal_waiting_would_not_help_travels_without_retry_after() -> None:
    """A budget smaller than one analysis: no ``x-retry-after``, and none made up (1) on
    the way back; a RESOURCE_EXHAUSTED that is not ours (no ``x-error-code``) still gets 1."""
    hopeless = CapacityExceeded("too small", retry_after_seconds=None)
    assert "x-retry-after" not in dict(trailing_metadata_for(hopeless))
    rebuilt = domain_error_from_rpc(_aio_error(hopeless))
    assert isinstance(rebuilt, CapacityExceeded)
    assert rebuilt.retry_after_seconds is None
    foreign = domain_error_from_rpc(
        grpc.aio.AioRpcError(
            SC.RESOURCE_EXHAUSTED, grpc.aio.Metadata(), grpc.aio.Metadata(), details="full"
        )
    )
    assert isinstance(foreign, CapacityExceeded)
    assert foreign.retry_after_seconds == 1


def test_transport_failures_do_not_pass_grpc_text_on() -> None:
    exc = grpc.aio.AioRpcError(
        SC.UNAVAILABLE,
        grpc.aio.Metadata(),
        grpc.aio.Metadata(),
        details="failed to connect to all addresses; last error: 10.1.2.3:50051",
    )
    error = domain_error_from_rpc(exc)
    assert isinstance(error, Unavailable)
    assert "10.1.2.3" not in error.message


def test_deadline_exceeded_is_unavailable_with_its_own_code() -> None:
    exc = grpc.aio.AioRpcError(SC.DEADLINE_EXCEEDED, grpc.aio.Metadata(), grpc.aio.Metadata())
    error = domain_error_from_rpc(exc)
    assert isinstance(error, Unavailable)
    assert error.code == "deadline_exceeded"


def test_unknown_statuses_become_a_plain_internal_error() -> None:
    exc = grpc.aio.AioRpcError(
        SC.UNKNOWN, grpc.aio.Metadata(), grpc.aio.Metadata(), details="Traceback ..."
    )
    error = domain_error_from_rpc(exc)
    assert type(error) is DomainError
    assert error.code == "internal"
    assert "Traceback" not in error.message


class Servicer:
    def __init__(self, failure: Exception | None) -> None:
        self.failure = failure
        self.Get = translated(self._get, "Servicer.Get")
        self.Watch = translated(self._watch, "Servicer.Watch")

    async def _get(self, request: bytes, context: Any) -> bytes:
        if self.failure is not None:
            raise self.failure
        return request.upper()

    async def _watch(self, request: bytes, context: Any) -> AsyncIterator[bytes]:
        yield b"first"
        if self.failure is not None:
            raise self.failure
        yield b"second"


def test_a_translated_method_passes_results_through() -> None:
    context = FakeContext()
    assert asyncio.run(Servicer(None).Get(b"abc", context)) == b"ABC"
    assert context.aborted is None


def test_a_domain_error_aborts_with_its_status_code_and_trailers() -> None:
    context = FakeContext()
    with pytest.raises(grpc.aio.AbortError):
        asyncio.run(Servicer(NotFound("no such job", code="job_not_found")).Get(b"x", context))
    assert context.aborted == (SC.NOT_FOUND, "no such job", (("x-error-code", "job_not_found"),))


def test_an_async_generator_yields_then_aborts_with_the_mapped_status() -> None:
    context = FakeContext()
    received: list[bytes] = []

    async def consume() -> None:
        async for item in Servicer(LeaseLost("gone")).Watch(b"x", context):
            received.append(item)

    with pytest.raises(grpc.aio.AbortError):
        asyncio.run(consume())
    assert received == [b"first"]
    assert context.aborted is not None
    assert context.aborted[0] == SC.ABORTED


class Aborting:
    def __init__(self) -> None:
        self.Get = translated(self._get, "Aborting.Get")
        self.Watch = translated(self._watch, "Aborting.Watch")

    async def _get(self, request: bytes, context: Any) -> bytes:
        await context.abort(SC.OUT_OF_RANGE, "as the handler chose")
        return b""

    async def _watch(self, request: bytes, context: Any) -> AsyncIterator[bytes]:
        yield b"first"
        await context.abort(SC.OUT_OF_RANGE, "as the handler chose")


def test_an_abort_inside_the_handler_is_not_rewrapped() -> None:
    context = FakeContext()
    with pytest.raises(grpc.aio.AbortError):
        asyncio.run(Aborting().Get(b"x", context))
    assert context.aborted == (SC.OUT_OF_RANGE, "as the handler chose", ())


def test_an_abort_inside_a_stream_handler_is_not_rewrapped() -> None:
    context = FakeContext()

    async def consume() -> None:
        async for _ in Aborting().Watch(b"x", context):
            pass

    with pytest.raises(grpc.aio.AbortError):
        asyncio.run(consume())
    assert context.aborted == (SC.OUT_OF_RANGE, "as the handler chose", ())


def test_a_domain_error_of_unknown_kind_does_not_show_its_message() -> None:
    context = FakeContext()
    with pytest.raises(grpc.aio.AbortError):
        asyncio.run(Servicer(DomainError("row 17 of user_operations")).Get(b"x", context))
    assert context.aborted == (SC.INTERNAL, "internal error", (("x-error-code", "internal"),))


@pytest.fixture
def json_logs(capsys: pytest.CaptureFixture[str]) -> Iterator[Any]:
    def lines() -> list[dict[str, Any]]:
        return [json.loads(line) for line in capsys.readouterr().err.splitlines() if line]

    yield lines
    reset_logging()


def test_an_unexpected_error_is_internal_and_logged_without_its_text(json_logs: Any) -> None:
    configure_logging(Settings(log_json="true"), process="operations")
    context = FakeContext()
    secret_text = "CV of Jane Doe, phone 555-0100"
    with pytest.raises(grpc.aio.AbortError):
        asyncio.run(Servicer(RuntimeError(secret_text)).Get(b"x", context))

    assert context.aborted == (SC.INTERNAL, "internal error", (("x-error-code", "internal"),))
    [event] = json_logs()
    assert event["event"] == "rpc_unexpected_error"
    assert event["error_type"] == "RuntimeError"
    assert event["method"] == "Servicer.Get"
    assert event["process"] == "operations"
    assert event["level"] == "error"
    assert event["timestamp"].endswith("Z")
    assert "Jane" not in json.dumps(event)


def test_log_level_filters_and_library_logs_share_the_format(json_logs: Any) -> None:
    configure_logging(Settings(log_json="true", log_level="warning"), process="gateway")
    structlog.get_logger().info("too_chatty")
    structlog.get_logger().warning("worth_seeing", operation_id="op-1")
    logging.getLogger("sqlalchemy.engine").info("SELECT 1")
    logging.getLogger("grpc").warning("keepalive watchdog")

    events = json_logs()
    assert [e["event"] for e in events] == ["worth_seeing", "keepalive watchdog"]
    assert events[1]["logger"] == "grpc"
    assert all(e["process"] == "gateway" for e in events)


def test_log_json_setting() -> None:
    assert use_json("auto", is_tty=False) is True
    assert use_json("auto", is_tty=True) is False
    assert use_json("true", is_tty=True) is True
    assert use_json("false", is_tty=False) is False
    with pytest.raises(SettingsError):
        use_json("sometimes", is_tty=False)
    with pytest.raises(SettingsError):
        configure_logging(Settings(log_level="loud"), process="x")
