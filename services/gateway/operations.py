"""``/api/operations``: list, get, wait for, cancel and retry the caller's operations.

``GET /api/operations/{id}:wait?timeout=S`` is a long-poll (SPEC §5): it
answers as soon as the operation's state differs from the state it had as the
wait began (a claim, a retry's wait, the end), or after ``S`` seconds (at most
30) with its state then. With ``seen=<updated_at>`` (as the caller last read
it) any change also answers, so a page follows progress without polling. The
rule is ``OperationsService.WaitOperation``'s (``OperationsApp.wait``). A live
operation's answers carry ``Retry-After``: when to look again.

A user holds at most OPS_GATEWAY_LONG_POLLS_PER_USER waits open at once (16 by
default), counted in this gateway process's memory (``limits.ConcurrencyLimit``);
one more gets 429 ``too_many_waits`` with ``Retry-After``. A slot is given back
when the wait ends, whatever ends it: the answer, an error, or the client
going away (the wait is then cut short).

As the gateway's stop begins (``stopping``) a wait answers at once, as at its
timeout: the operation as it is then, on a connection that then closes; the
client's next wait reaches the gateway that replaces this one.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from durable_ops.api.ai_admission.v1 import ai_admission_pb2 as admission_pb
from durable_ops.api.ai_admission.v1 import ai_admission_pb2_grpc as admission_grpc
from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.api.operations.v1 import operations_pb2_grpc as pb_grpc
from durable_ops.gateway import dto
from durable_ops.gateway.ai import look_again_headers
from durable_ops.gateway.bodies import no_body
from durable_ops.gateway.calls import owner_calls, stub_for
from durable_ops.gateway.context import draining_of, long_polls_of
from durable_ops.gateway.ids import resource_id
from durable_ops.gateway.limits import LimitExceeded
from durable_ops.gateway.openapi import (
    NO_BODY,
    PAGE_PARAMETERS,
    endpoint,
    errors,
    ok,
    path_id,
    query,
    ref,
)
from durable_ops.gateway.pagination import PAGING_PARAMETERS, list_body, page_request, query_params
from durable_ops.gateway.problems import invalid, too_many_waits
from durable_ops.model import bounds
from durable_ops.model.errors import InvalidArgument, NotFound

# A refused wait may try again this soon: another wait of the user may have ended by then.
WAIT_RETRY_AFTER_SECONDS = 2

BACKEND = "operations"
LIST_PARAMETERS = (*PAGING_PARAMETERS, "state", "task_type")


def _not_found() -> NotFound:
    # The backend's answer for a missing id or another owner's; malformed ids get the same.
    return NotFound("operation not found", code="operation_not_found")


_stub = stub_for(BACKEND, pb_grpc.OperationsServiceStub)
_admission = stub_for("ai_admission", admission_grpc.AiAdmissionServiceStub)


def _answer(operation: pb.Operation) -> JSONResponse:
    return JSONResponse(dto.operation(operation), headers=look_again_headers(operation))


# A number as JSON writes one, unsigned (the document says "number"); at most 32 characters.
_SECONDS = re.compile(r"(?=.{1,32}$)[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?")


def _wait_seconds(params: Mapping[str, str]) -> float:
    raw = params.get("timeout")
    if raw is None:
        return bounds.WAIT_SECONDS_MAX
    # Not float() alone: it also reads "1_0", "+2", " 2" and full-width digits.
    seconds = float(raw) if _SECONDS.fullmatch(raw) else -1.0
    if not 0 <= seconds <= bounds.WAIT_SECONDS_MAX:
        raise invalid(
            "timeout", f"must be a number of seconds from 0 to {bounds.WAIT_SECONDS_MAX:g}"
        )
    return seconds


def _seen(raw: str) -> datetime:
    try:
        return dto.parse_rfc3339(raw)
    except ValueError:
        raise invalid(
            "seen", "must be an RFC 3339 time with its offset, the operation's updated_at"
        ) from None


def _filters(params: Mapping[str, str]) -> tuple[pb.OperationState.ValueType, str]:
    state = params.get("state", "")
    try:
        state_number = dto.state_value(state) if state else pb.OPERATION_STATE_UNSPECIFIED
    except ValueError:
        raise invalid("state", "must be one of " + ", ".join(dto.STATE_NAMES)) from None
    task_type = params.get("task_type", "")
    if task_type:
        try:
            bounds.task_type(task_type)
        except InvalidArgument as exc:
            raise invalid("task_type", exc.reason) from None
    return state_number, task_type


async def list_operations(request: Request) -> Response:
    calls = await owner_calls(request)
    params = query_params(request, LIST_PARAMETERS)
    page = page_request(params)
    state, task_type = _filters(params)
    reply = await calls(
        _stub(calls).ListOperations,
        pb.ListOperationsRequest(
            page_size=page.size, page_token=page.token, state=state, task_type=task_type
        ),
    )
    items = [dto.operation(message) for message in reply.operations]
    return JSONResponse(list_body(items, reply.next_page_token))


async def get_operation(request: Request) -> Response:
    calls = await owner_calls(request)
    operation_id = resource_id(request, _not_found)
    reply = await calls(
        _stub(calls).GetOperation, pb.GetOperationRequest(operation_id=operation_id)
    )
    return _answer(reply)


async def wait_operation(request: Request) -> Response:
    calls = await owner_calls(request)
    operation_id = resource_id(request, _not_found)
    params = query_params(request, ("timeout", "seen"))
    seconds = _wait_seconds(params)
    wait = pb.WaitOperationRequest(operation_id=operation_id)
    wait.timeout.FromTimedelta(timedelta(seconds=seconds))
    if "seen" in params:
        wait.seen_updated_at.FromDatetime(_seen(params["seen"]))
    try:
        with (
            long_polls_of(request).hold(calls.user.id),
            draining_of(request).watching() as stopping,
        ):
            waiting = asyncio.ensure_future(calls(_stub(calls).WaitOperation, wait, waits=seconds))
            gone = asyncio.ensure_future(_disconnected(request))
            stop = asyncio.ensure_future(stopping.wait())
            try:
                ended, _ = await asyncio.wait(
                    (waiting, gone, stop), return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                for task in (waiting, gone, stop):
                    task.cancel()
            if waiting in ended:
                return _answer(waiting.result())
            if gone in ended:
                return Response(status_code=204)  # nobody is left to read it
        # The gateway stops: the operation as it is now, as the wait's timeout would answer.
        reply = await calls(
            _stub(calls).GetOperation, pb.GetOperationRequest(operation_id=operation_id)
        )
        return _answer(reply)
    except LimitExceeded as exc:
        raise too_many_waits(
            exc.retry_after,
            "you have too many waits open at once; close one or try again shortly",
        ) from None


async def _disconnected(request: Request) -> None:
    """Returns once the client has gone away (a GET has no body left to read)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def cancel_operation(request: Request) -> Response:
    calls = await owner_calls(request)
    operation_id = resource_id(request, _not_found)
    await no_body(request)
    reply = await calls(
        _stub(calls).CancelOperation, pb.CancelOperationRequest(operation_id=operation_id)
    )
    return JSONResponse(dto.operation(reply))


async def retry_operation(request: Request) -> Response:
    calls = await owner_calls(request)
    operation_id = resource_id(request, _not_found)
    await no_body(request)
    # Through admission: an analysis runs again only as admitted again (capacity, budget).
    reply = await calls(
        _admission(calls).Retry, admission_pb.RetryRequest(operation_id=operation_id)
    )
    return JSONResponse(dto.operation(reply.operation))


routes: Sequence[BaseRoute] = [
    Route("/api/operations", list_operations, methods=["GET"]),
    # Before the plain GET: its {id} would take "…:wait" whole.
    Route("/api/operations/{id}:wait", wait_operation, methods=["GET"]),
    Route("/api/operations/{id}", get_operation, methods=["GET"]),
    Route("/api/operations/{id}/cancel", cancel_operation, methods=["POST"]),
    Route("/api/operations/{id}/retry", retry_operation, methods=["POST"]),
]

_ID = path_id("operation id")
_TAG = "operations"
openapi_paths: Mapping[str, Mapping[str, Any]] = {
    "/api/operations": {
        "get": endpoint(
            "List the caller's operations, newest first",
            "listOperations",
            _TAG,
            {"200": ok("a page of operations", ref("OperationList")), **errors(400, 503, 504)},
            parameters=[
                *PAGE_PARAMETERS,
                query(
                    "state", {"type": "string", "enum": list(dto.STATE_NAMES)}, "only this state"
                ),
                query(
                    "task_type",
                    {
                        "type": "string",
                        "maxLength": bounds.TASK_TYPE_MAX,
                        "pattern": "^[a-z0-9._-]*$",
                    },
                    "only this task type",
                ),
            ],
        )
    },
    "/api/operations/{id}": {
        "get": endpoint(
            "One operation of the caller",
            "getOperation",
            _TAG,
            {"200": ok("the operation", ref("Operation")), **errors(404, 503, 504)},
            parameters=[_ID],
        )
    },
    "/api/operations/{id}:wait": {
        "get": endpoint(
            "Wait until the operation's state changes (or, given `seen`, anything changes),"
            " or the timeout passes (a long-poll)",
            "waitOperation",
            _TAG,
            {
                "200": ok(
                    "the operation: in another state than at the start (or changed from"
                    " `seen`), or as it is at the timeout; live, with Retry-After",
                    ref("Operation"),
                ),
                **errors(400, 404, 429, 503, 504),
            },
            parameters=[
                _ID,
                query(
                    "timeout",
                    {"type": "number", "minimum": 0, "maximum": bounds.WAIT_SECONDS_MAX},
                    f"seconds to wait at most (default and most {bounds.WAIT_SECONDS_MAX:g})",
                ),
                query(
                    "seen",
                    {"type": "string", "format": "date-time"},
                    "the operation's `updated_at` as last read: any change answers too"
                    " (progress, a cancel request); without it only a change of state does",
                ),
            ],
        )
    },
    "/api/operations/{id}/cancel": {
        "post": endpoint(
            "Cancel: pending ones at once; a running one gets `cancel_requested`",
            "cancelOperation",
            _TAG,
            {
                "200": ok("the operation after the request", ref("Operation")),
                **errors(400, 403, 404, 409, 413, 415, 503, 504),
            },
            parameters=[_ID],
            request_body=NO_BODY,
        )
    },
    "/api/operations/{id}/retry": {
        "post": endpoint(
            "Retry a failed or cancelled operation with a fresh attempt budget; an AI"
            " analysis is admitted again (entitlement, capacity, its daily token budget)",
            "retryOperation",
            _TAG,
            {
                "200": ok("the operation, queued again", ref("Operation")),
                **errors(400, 403, 404, 409, 413, 415, 429, 503, 504),
            },
            parameters=[_ID],
            request_body=NO_BODY,
        )
    },
}
openapi_schemas: Mapping[str, Any] = {}
