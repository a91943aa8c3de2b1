"""Notification rows ⇄ protobuf messages."""

from __future__ import annotations

from datetime import UTC

from google.protobuf.timestamp_pb2 import Timestamp

from durable_ops.api.notifications.v1 import notifications_pb2 as pb
from durable_ops.storage.schema import UserNotification


def notification(row: UserNotification) -> pb.Notification:
    message = pb.Notification(
        id=row.id,
        operation_id=row.operation_id or "",
        task_type=row.task_type,
        outcome=row.outcome,
        title=row.title,
        body=row.body,
    )
    message.created_at.FromDatetime(row.created_at.astimezone(UTC))
    if row.read_at is not None:
        read_at = Timestamp()
        read_at.FromDatetime(row.read_at.astimezone(UTC))
        message.read_at.CopyFrom(read_at)
    return message
