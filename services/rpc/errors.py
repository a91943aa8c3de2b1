"""THE translation between domain errors and gRPC status, in both directions.

Servers: ``ErrorInterceptor`` (every server ``build_server`` makes has it) wraps
every servicer method once; a ``DomainError`` ends the call with the status of
its ``kind`` and its stable ``code`` in the trailing metadata ``x-error-code``
(plus ``x-error-field`` / ``x-retry-after`` / ``x-error-operation-id``).
Anything else is ``INTERNAL`` with a generic message and is logged without its
text, which may quote user content.

Clients: ``domain_error_from_rpc`` rebuilds the typed error from a failed call.
"""

from __future__ import annotations

import inspect
import traceback
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, NoReturn, ParamSpec, TypeVar

import grpc
import structlog
from google.protobuf.message import DecodeError

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
from durable_ops.rpc import ServicerContext
from durable_ops.rpc.handlers import SwappingInterceptor, behaviour_of, handler_like

ERROR_CODE = "x-error-code"
ERROR_FIELD = "x-error-field"
ERROR_REASON = "x-error-reason"  # what is wrong with the field, without its name
RETRY_AFTER = "x-retry-after"
ERROR_OPERATION = "x-error-operation-id"  # the unfinished operation an ``InUse`` names
INTERNAL_MESSAGE = "internal error"

STATUS_BY_KIND: Mapping[str, grpc.StatusCode] = {
    "invalid_argument": grpc.StatusCode.INVALID_ARGUMENT,
    "unauthenticated": grpc.StatusCode.UNAUTHENTICATED,
    "permission_denied": grpc.StatusCode.PERMISSION_DENIED,
    "not_found": grpc.StatusCode.NOT_FOUND,
    "conflict": grpc.StatusCode.ALREADY_EXISTS,
    "failed_precondition": grpc.StatusCode.FAILED_PRECONDITION,
    "aborted": grpc.StatusCode.ABORTED,
    "resource_exhausted": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "unavailable": grpc.StatusCode.UNAVAILABLE,
}

# The inverse, for the classes whose constructor takes only a message.
_PLAIN_ERROR_BY_STATUS: Mapping[grpc.StatusCode, type[DomainError]] = {
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: Conflict,
    grpc.StatusCode.FAILED_PRECONDITION: InvalidTransition,
    grpc.StatusCode.ABORTED: LeaseLost,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
}

_log = structlog.get_logger(__name__)

P = ParamSpec("P")
T = TypeVar("T")


def status_for(error: DomainError) -> grpc.StatusCode:
    return STATUS_BY_KIND.get(error.kind, grpc.StatusCode.INTERNAL)


def trailing_metadata_for(error: DomainError) -> tuple[tuple[str, str], ...]:
    if error.kind not in STATUS_BY_KIND:
        return ((ERROR_CODE, "internal"),)
    trailers = [(ERROR_CODE, error.code)]
    if isinstance(error, InvalidArgument):
        trailers += [(ERROR_FIELD, error.field), (ERROR_REASON, error.reason)]
    if isinstance(error, CapacityExceeded) and error.retry_after_seconds is not None:
        trailers.append((RETRY_AFTER, str(error.retry_after_seconds)))
    if isinstance(error, InUse):
        trailers.append((ERROR_OPERATION, error.operation_id))
    return tuple(trailers)


async def abort_with(context: ServicerContext, error: DomainError) -> NoReturn:
    """End the call with the status of ``error``; unknown kinds never show their message."""
    known = error.kind in STATUS_BY_KIND
    await context.abort(
        status_for(error),
        error.message if known else INTERNAL_MESSAGE,
        trailing_metadata=trailing_metadata_for(error),
    )
    raise AssertionError("context.abort returned")  # pragma: no cover - abort always raises


async def _abort_for(context: ServicerContext, exc: Exception, where: str) -> NoReturn:
    if isinstance(exc, DomainError):
        await abort_with(context, exc)
    # Type and stack only: the exception text may quote a request.
    _log.error(
        "rpc_unexpected_error",
        method=where,
        error_type=type(exc).__qualname__,
        stack="".join(traceback.format_tb(exc.__traceback__)),
    )
    await abort_with(context, DomainError(INTERNAL_MESSAGE))


class _Undecodable:
    """What a request's bytes became when they are no message of the method's type."""


UNDECODABLE = _Undecodable()


def malformed_request() -> InvalidArgument:
    return InvalidArgument("request", "is not a valid message", code="malformed_request")


def tolerant(deserializer: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    """``deserializer`` answering ``UNDECODABLE`` instead of raising. grpc.aio runs a
    handler's deserializer before any interceptor's behaviour and answers its error as
    UNKNOWN with a logged stack trace, credential or not; the behaviour refuses it instead
    (``translated``), after the credential check, as INVALID_ARGUMENT."""

    def parse(raw: bytes) -> Any:
        try:
            return deserializer(raw)
        except DecodeError:  # bad wire format, or a string field that is not UTF-8
            return UNDECODABLE

    return parse


async def _decoded(requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
    async for request in requests:
        if request is UNDECODABLE:
            raise malformed_request()
        yield request


def translated(
    behaviour: Callable[..., Any], where: str, *, request_streaming: bool = False
) -> Callable[..., Any]:
    """``behaviour`` (a servicer method: coroutine or async generator) with every error
    it raises ended as its status, and a request that did not decode (``tolerant``)
    refused; ``where`` names it in the log."""

    def checked(request: Any) -> Any:
        if request_streaming:
            return _decoded(request)
        if request is UNDECODABLE:
            raise malformed_request()
        return request

    if inspect.isasyncgenfunction(behaviour):

        async def streaming(request: Any, context: ServicerContext) -> AsyncIterator[Any]:
            try:
                async for item in behaviour(checked(request), context):
                    yield item
            except grpc.aio.AbortError:
                raise
            except Exception as exc:
                await _abort_for(context, exc, where)

        return streaming

    async def unary(request: Any, context: ServicerContext) -> Any:
        try:
            return await behaviour(checked(request), context)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            await _abort_for(context, exc, where)

    return unary


class ErrorInterceptor(SwappingInterceptor):
    """Error translation for every method a server serves, in one place: innermost, so
    the interceptors around it (metrics) see the status the caller gets."""

    def swap(self, method: str, handler: Any) -> Any:
        behaviour = translated(
            behaviour_of(handler), method, request_streaming=handler.request_streaming
        )
        parse = handler.request_deserializer
        return handler_like(handler, behaviour, tolerant(parse) if parse is not None else None)


def _trailers(exc: grpc.aio.AioRpcError) -> dict[str, str]:
    found: dict[str, str] = {}
    for key, value in exc.trailing_metadata() or ():
        if isinstance(key, str) and isinstance(value, str):
            found.setdefault(key.lower(), value)
    return found


def _retry_after(raw: str | None, *, ours: bool) -> int | None:
    """The refusal's ``x-retry-after``. Without one: None from our own server (it sends
    none when waiting does not help), 1 from anything else (a proxy, the transport)."""
    if raw is None:
        return None if ours else 1
    try:
        return max(0, int(raw))
    except ValueError:
        return 1


def domain_error_from_rpc(exc: grpc.aio.AioRpcError) -> DomainError:
    """The typed error behind a failed call, with its code, field and retry-after.

    Details are passed on only when the server marked the error as ours
    (``x-error-code``); transport failures get a generic message instead of
    grpc's text, which names internal addresses.
    """
    status = exc.code()
    trailers = _trailers(exc)
    code = trailers.get(ERROR_CODE)
    details: str = (exc.details() or "") if code else ""
    error = _rebuild(status, details, trailers)
    if code:
        error.code = code
    return error


def domain_error_from_status(status_code: int, code: str, message: str) -> DomainError:
    """The typed error one item of a batched answer stands for (its status, code, message)."""
    status = next(
        (status for status in grpc.StatusCode if status.value[0] == status_code),
        grpc.StatusCode.UNKNOWN,
    )
    error = _rebuild(status, message, {})
    if code:
        error.code = code
    return error


def _rebuild(status: grpc.StatusCode, details: str, trailers: Mapping[str, str]) -> DomainError:
    if status == grpc.StatusCode.INVALID_ARGUMENT:
        field = trailers.get(ERROR_FIELD, "request")
        return InvalidArgument(field, trailers.get(ERROR_REASON) or details or "is invalid")
    if status == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return CapacityExceeded(
            details or "over capacity",
            retry_after_seconds=_retry_after(
                trailers.get(RETRY_AFTER), ours=ERROR_CODE in trailers
            ),
        )
    if status == grpc.StatusCode.DEADLINE_EXCEEDED:
        # No domain class for it; the code lets the gateway answer 504 rather than 503.
        return Unavailable("the service did not answer in time", code="deadline_exceeded")
    if status == grpc.StatusCode.FAILED_PRECONDITION and ERROR_OPERATION in trailers:
        return InUse(details or "in use", operation_id=trailers[ERROR_OPERATION])
    plain = _PLAIN_ERROR_BY_STATUS.get(status)
    if plain is None:
        return DomainError(INTERNAL_MESSAGE)
    return plain(details or f"remote call failed: {status.name.lower()}")
