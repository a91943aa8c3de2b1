"""``/api/notifications``: list, unread count, read (one or all) and dismiss the caller's
notifications."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from durable_ops.api.notifications.v1 import notifications_pb2 as pb
from durable_ops.api.notifications.v1 import notifications_pb2_grpc as pb_grpc
from durable_ops.gateway import dto
from durable_ops.gateway.bodies import no_body
from durable_ops.gateway.calls import owner_calls, stub_for
from durable_ops.gateway.events import stream_signals_of
from durable_ops.gateway.ids import resource_id
from durable_ops.gateway.openapi import (
    NO_BODY,
    PAGE_PARAMETERS,
    endpoint,
    errors,
    list_of,
    ok,
    path_id,
    ref,
)
from durable_ops.gateway.pagination import PAGING_PARAMETERS, list_body, page_request, query_params
from durable_ops.model.errors import NotFound

BACKEND = "notifications"


def _not_found() -> NotFound:
    return NotFound("notification not found", code="notification_not_found")


_stub = stub_for(BACKEND, pb_grpc.NotificationsServiceStub)


async def list_notifications(request: Request) -> Response:
    calls = await owner_calls(request)
    page = page_request(query_params(request, PAGING_PARAMETERS))
    reply = await calls(
        _stub(calls).ListNotifications,
        pb.ListNotificationsRequest(page_size=page.size, page_token=page.token),
    )
    items = [dto.notification(message) for message in reply.notifications]
    return JSONResponse(list_body(items, reply.next_page_token))


async def unread_count(request: Request) -> Response:
    calls = await owner_calls(request)
    query_params(request, ())
    reply = await calls(_stub(calls).GetUnreadCount, pb.GetUnreadCountRequest())
    return JSONResponse({"count": reply.count})


async def mark_read(request: Request) -> Response:
    calls = await owner_calls(request)
    notification_id = resource_id(request, _not_found)
    await no_body(request)
    reply = await calls(_stub(calls).MarkRead, pb.MarkReadRequest(notification_id=notification_id))
    stream_signals_of(request).unread_changed(calls.user.id)  # the user's other tabs' bells
    return JSONResponse(dto.notification(reply))


async def dismiss(request: Request) -> Response:
    calls = await owner_calls(request)
    notification_id = resource_id(request, _not_found)
    await no_body(request)
    reply = await calls(_stub(calls).Dismiss, pb.DismissRequest(notification_id=notification_id))
    stream_signals_of(request).unread_changed(calls.user.id)
    return JSONResponse(dto.notification(reply))


async def mark_all_read(request: Request) -> Response:
    calls = await owner_calls(request)
    await no_body(request)
    reply = await calls(_stub(calls).MarkAllRead, pb.MarkAllReadRequest())
    stream_signals_of(request).unread_changed(calls.user.id)
    return JSONResponse({"marked": reply.marked})


routes: Sequence[BaseRoute] = [
    Route("/api/notifications", list_notifications, methods=["GET"]),
    Route("/api/notifications/unread-count", unread_count, methods=["GET"]),
    Route("/api/notifications/read-all", mark_all_read, methods=["POST"]),
    Route("/api/notifications/{id}/read", mark_read, methods=["POST"]),
    Route("/api/notifications/{id}/dismiss", dismiss, methods=["POST"]),
]

_TIME = {"type": "string", "format": "date-time"}
_TAG = "notifications"
_ID = path_id("notification id")
openapi_schemas: Mapping[str, Any] = {
    "Notification": {
        "type": "object",
        "description": "a generic notice about a finished operation; never inputs or results",
        "required": [
            "id",
            "operation_id",
            "task_type",
            "outcome",
            "title",
            "body",
            "created_at",
            "read_at",
        ],
        "additionalProperties": False,
        "properties": {
            "id": {"type": "string"},
            "operation_id": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "task_type": {"type": "string"},
            "outcome": {"type": "string", "enum": ["succeeded", "failed", "cancelled"]},
            "title": {"type": "string"},
            "body": {"type": "string"},
            "created_at": _TIME,
            "read_at": {"anyOf": [_TIME, {"type": "null"}], "description": "null: unread"},
        },
    },
    "NotificationList": list_of("Notification"),
    "UnreadCount": {
        "type": "object",
        "required": ["count"],
        "additionalProperties": False,
        "properties": {"count": {"type": "integer", "minimum": 0}},
    },
    "MarkedRead": {
        "type": "object",
        "required": ["marked"],
        "additionalProperties": False,
        "properties": {"marked": {"type": "integer", "minimum": 0}},
    },
}
openapi_paths: Mapping[str, Mapping[str, Any]] = {
    "/api/notifications": {
        "get": endpoint(
            "List the caller's notifications, newest first (dismissed ones excluded)",
            "listNotifications",
            _TAG,
            {
                "200": ok("a page of notifications", ref("NotificationList")),
                **errors(400, 503, 504),
            },
            parameters=PAGE_PARAMETERS,
        )
    },
    "/api/notifications/unread-count": {
        "get": endpoint(
            "How many notifications are unread (dismissed ones excluded)",
            "getUnreadCount",
            _TAG,
            {"200": ok("the count", ref("UnreadCount")), **errors(400, 503, 504)},
        )
    },
    "/api/notifications/read-all": {
        "post": endpoint(
            "Mark every unread notification read (dismissed ones excluded)",
            "markAllNotificationsRead",
            _TAG,
            {
                "200": ok("how many were marked read", ref("MarkedRead")),
                **errors(400, 403, 413, 415, 503, 504),
            },
            request_body=NO_BODY,
        )
    },
    "/api/notifications/{id}/read": {
        "post": endpoint(
            "Mark a notification read",
            "markNotificationRead",
            _TAG,
            {
                "200": ok("the notification", ref("Notification")),
                **errors(400, 403, 404, 413, 415, 503, 504),
            },
            parameters=[_ID],
            request_body=NO_BODY,
        )
    },
    "/api/notifications/{id}/dismiss": {
        "post": endpoint(
            "Dismiss a notification: it leaves lists and the unread count",
            "dismissNotification",
            _TAG,
            {
                "200": ok("the notification", ref("Notification")),
                **errors(400, 403, 404, 413, 415, 503, 504),
            },
            parameters=[_ID],
            request_body=NO_BODY,
        )
    },
}
