"""Problem details (RFC 9457): THE table from domain errors to HTTP, and the error responses.

Every error the gateway answers is ``application/problem+json`` with ``type``,
``title``, ``status``, ``detail``, a stable ``code`` and, for invalid
arguments, the ``field``. Route code raises ``Problem`` (or lets a
``DomainError`` from a backend call propagate); the handlers installed by
``install`` render both. Anything else is a bug and becomes a logged 500.

The ``detail`` is what a person reads (the page shows it), so it is always a
full sentence: ``Problem`` gives it a closing full stop and, unless it opens
with a field name, a capital letter, whoever wrote the text (a route, a
service across gRPC). An invalid argument reads "<field> <reason>.", e.g.
"page_size must be an integer between 1 and 100.".

Text that came from a request (a field name a client made up) may hold a lone
surrogate, which UTF-8 cannot encode, or a control or bidi formatting character,
which makes the rest of the message show other than it reads (after U+202E it
shows backwards): ``printable`` spells each as an escape, so rendering a problem
never fails and its detail reads as written. A 405 names in ``Allow`` every method of every
route on the path (Starlette's own names only those of the first route found).
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

import structlog
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Match, Route

from durable_ops.model.errors import CapacityExceeded, DomainError, InUse, InvalidArgument

PROBLEM_JSON = "application/problem+json"
TYPE_PREFIX = "urn:durable-ops:problem:"

# The gRPC -> HTTP table of SPEC §5, keyed by the domain error kind that
# ``durable_ops.rpc.errors.domain_error_from_rpc`` rebuilds from each status.
HTTP_STATUS_BY_KIND: Mapping[str, int] = {
    "invalid_argument": 400,  # INVALID_ARGUMENT
    "unauthenticated": 401,  # UNAUTHENTICATED
    "permission_denied": 403,  # PERMISSION_DENIED
    "not_found": 404,  # NOT_FOUND
    "conflict": 409,  # ALREADY_EXISTS
    "aborted": 409,  # ABORTED
    "failed_precondition": 409,  # FAILED_PRECONDITION
    "resource_exhausted": 429,  # RESOURCE_EXHAUSTED
    "unavailable": 503,  # UNAVAILABLE
}
# DEADLINE_EXCEEDED arrives as ``Unavailable`` with this code (see domain_error_from_rpc).
HTTP_STATUS_BY_CODE: Mapping[str, int] = {"deadline_exceeded": 504}
BACKEND_UNAVAILABLE = "A service behind the gateway is unavailable right now; try again shortly."

_log = structlog.get_logger(__name__)
_SENTENCE_ENDS = (".", "!", "?")
_METHOD_ORDER = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


# C0 and C1 controls, the line and paragraph separators, and the bidi marks, embeddings,
# overrides and isolates: in an echoed name they break the line or turn the message round.
_UNSHOWABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` with any lone surrogate, control or bidi formatting character spelt as an
    escape (``\\udXXX``, ``\\u202e``): encodable as UTF-8, and shown as it reads."""
    text = _UNSHOWABLE.sub(lambda found: f"\\u{ord(found.group()):04x}", text)
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def as_sentence(text: str, *, capitalise: bool = True) -> str:
    """``text`` with a closing full stop and, with ``capitalise``, a capital first letter."""
    text = text.strip()
    if not text:
        return text
    if capitalise and text[0].islower():
        text = text[0].upper() + text[1:]
    return text if text.endswith(_SENTENCE_ENDS) else text + "."


class Problem(Exception):
    """An HTTP error answer; raise it from route code."""

    def __init__(
        self,
        status: int,
        code: str,
        detail: str,
        *,
        field: str | None = None,
        headers: Mapping[str, str] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        # A detail that names a field opens with it, as spelt: "page_size must be ...".
        detail = printable(as_sentence(detail, capitalise=field is None))
        field = None if field is None else printable(field)
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.field = field
        self.headers = dict(headers or {})
        self.extra = dict(extra or {})

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "type": TYPE_PREFIX + self.code,
            "title": HTTPStatus(self.status).phrase,
            "status": self.status,
            "detail": self.detail,
            "code": self.code,
        }
        if self.field is not None:
            body["field"] = self.field
        body.update(self.extra)
        return body

    def response(self) -> JSONResponse:
        return JSONResponse(
            self.body(), status_code=self.status, headers=self.headers, media_type=PROBLEM_JSON
        )


def invalid(field: str, reason: str, *, code: str = "invalid_argument") -> Problem:
    """400 for ``field``; ``reason`` completes the sentence: "is required", "must be ..."."""
    return Problem(400, code, f"{field} {reason}", field=field)


def one_header(request: Request, name: str) -> str | None:
    """The header ``name``, or None; sent twice it is refused (400), never one of the two
    picked: a proxy in front may have read the other."""
    values = request.headers.getlist(name)
    if len(values) > 1:
        raise invalid(name, "must be sent once")
    return values[0] if values else None


def too_many_waits(retry_after: int, message: str) -> Problem:
    """429 ``too_many_waits``: every long-poll slot of the user is taken (a wait, a stream)."""
    return Problem(429, "too_many_waits", message, headers={"Retry-After": str(retry_after)})


def problem_from_domain(error: DomainError) -> Problem:
    """The one mapping of a domain error to HTTP; unknown kinds are a backend failure (503)."""
    status = HTTP_STATUS_BY_CODE.get(error.code) or HTTP_STATUS_BY_KIND.get(error.kind)
    if status is None:
        return Problem(503, "backend_unavailable", BACKEND_UNAVAILABLE)
    if isinstance(error, InvalidArgument):
        return invalid(error.field, error.reason, code=error.code)
    headers: dict[str, str] = {}
    if isinstance(error, CapacityExceeded) and error.retry_after_seconds is not None:
        headers["Retry-After"] = str(max(0, error.retry_after_seconds))
    # The operation to cancel first: the page offers it without parsing the sentence.
    extra = {"operation_id": error.operation_id} if isinstance(error, InUse) else None
    return Problem(status, error.code, error.message, headers=headers, extra=extra)


async def _problem(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, Problem)
    return exc.response()


async def _domain_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, DomainError)
    return problem_from_domain(exc).response()


def allowed_methods(request: Request) -> list[str]:
    """Every method a route of the app serves on the request's path, in a fixed order."""
    found: set[str] = set()
    for route in request.app.routes:
        if isinstance(route, Route) and route.methods:
            match, _ = route.matches(request.scope)
            if match is not Match.NONE:
                found.update(route.methods)
    return sorted(found, key=lambda m: (*_METHOD_ORDER, m).index(m))


async def http_exception(request: Request, exc: Exception) -> Response:
    """Starlette's own errors (unknown path, wrong method) in the same shape."""
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    detail = {
        404: "There is no such resource.",
        405: "This resource does not accept that method.",
    }.get(exc.status_code, str(exc.detail))
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        methods = allowed_methods(request)
        if methods:
            headers["Allow"] = ", ".join(methods)
    return Problem(exc.status_code, code, detail, headers=headers).response()


async def _client_gone(request: Request, exc: Exception) -> Response:
    """The client left before its body arrived: its own doing, and nobody to answer (the
    answer is made for the record only). Not a 500: Starlette re-raises what reaches the
    catch-all handler, and the server then logs it as a fault, a log anyone could fill."""
    _log.info("gateway_client_gone", path=request.url.path)
    return Problem(400, "client_gone", "The request ended before its body arrived.").response()


async def _unexpected(request: Request, exc: Exception) -> Response:
    # Type and stack only: the exception text may quote a request.
    _log.error(
        "gateway_unexpected_error",
        path=request.url.path,
        error_type=type(exc).__qualname__,
        stack="".join(traceback.format_tb(exc.__traceback__)),
    )
    return Problem(
        500, "internal_error", "Something went wrong here; it has been logged."
    ).response()


EXCEPTION_HANDLERS: Mapping[Any, Any] = {
    Problem: _problem,
    DomainError: _domain_error,
    HTTPException: http_exception,
    ClientDisconnect: _client_gone,
    Exception: _unexpected,
}
