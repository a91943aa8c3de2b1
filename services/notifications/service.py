"""The Notifications gRPC servicer: owner scope only, one transaction per call."""

from __future__ import annotations

from durable_ops.api.notifications.v1 import notifications_pb2 as pb
from durable_ops.api.notifications.v1 import notifications_pb2_grpc as pb_grpc
from durable_ops.clock import Clock
from durable_ops.model.scope import require_user_agent
from durable_ops.rpc import ServicerContext
from durable_ops.rpc.scope import caller_scope
from durable_ops.storage import notifications
from durable_ops.storage.db import Database
from durable_ops.wire.notifications import notification

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["NotificationsService"].full_name


class NotificationsService(pb_grpc.NotificationsServiceServicer):
    def __init__(self, db: Database, clock: Clock) -> None:
        self._db = db
        self._clock = clock

    async def ListNotifications(
        self, request: pb.ListNotificationsRequest, context: ServicerContext
    ) -> pb.ListNotificationsResponse:
        owner = require_user_agent(caller_scope(context)).owner_id
        page = await self._db.run_async(
            lambda tx: notifications.list_page(
                tx, size=request.page_size, token=request.page_token
            ),
            owner_id=owner,
            write=False,
        )
        return pb.ListNotificationsResponse(
            notifications=[notification(row) for row in page.items],
            next_page_token=page.next_token or "",
        )

    async def GetUnreadCount(
        self, request: pb.GetUnreadCountRequest, context: ServicerContext
    ) -> pb.GetUnreadCountResponse:
        owner = require_user_agent(caller_scope(context)).owner_id
        count = await self._db.run_async(notifications.unread_count, owner_id=owner, write=False)
        return pb.GetUnreadCountResponse(count=count)

    async def MarkRead(
        self, request: pb.MarkReadRequest, context: ServicerContext
    ) -> pb.Notification:
        owner = require_user_agent(caller_scope(context)).owner_id
        now = self._clock()
        row = await self._db.run_async(
            lambda tx: notifications.mark_read(tx, request.notification_id, now), owner_id=owner
        )
        return notification(row)

    async def Dismiss(
        self, request: pb.DismissRequest, context: ServicerContext
    ) -> pb.Notification:
        owner = require_user_agent(caller_scope(context)).owner_id
        now = self._clock()
        row = await self._db.run_async(
            lambda tx: notifications.dismiss(tx, request.notification_id, now), owner_id=owner
        )
        return notification(row)

    async def MarkAllRead(
        self, request: pb.MarkAllReadRequest, context: ServicerContext
    ) -> pb.MarkAllReadResponse:
        owner = require_user_agent(caller_scope(context)).owner_id
        now = self._clock()
        marked = await self._db.run_async(
            lambda tx: notifications.mark_all_read(tx, now), owner_id=owner
        )
        return pb.MarkAllReadResponse(marked=marked)
