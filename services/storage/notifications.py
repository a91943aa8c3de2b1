"""All SQL of the notification aggregate.

The terminal notification is written by the same transaction that moves the
operation (``insert_for_operations``, called by ``operations.apply``), as one
``INSERT … SELECT`` per outcome for a whole batch of transitions. The wording comes from the model
and names only the kind of work and its outcome.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Insert, Table, bindparam, case, delete, func, insert, literal, select, update

from durable_ops.model import bounds
from durable_ops.model.errors import NotFound
from durable_ops.model.notifications import wording
from durable_ops.model.states import OperationState
from durable_ops.model.tasks import TASKS
from durable_ops.storage.pages import Page, newest_first_page
from durable_ops.storage.per_row import per_row, row_ids
from durable_ops.storage.schema import UserNotification, UserOperation, UtcDateTime
from durable_ops.storage.tx import SCOPE_OWNER, ScopeViolation, Tx

OPS = cast(Table, UserOperation.__table__)
NOTIFICATIONS = cast(Table, UserNotification.__table__)
_OWNED = NOTIFICATIONS.c.owner_user_id == SCOPE_OWNER


@functools.cache
def _insert_many_from_operations(outcome: OperationState, count: int) -> Insert:
    """``INSERT … SELECT`` of ``count`` operations' notifications, of many owners at once (a
    batch of lease settlements, neutral scope): one notification id per operation, by
    ``CASE id``. The wording is fixed per outcome (a CASE over the task type), so the
    statement is built once and only ids and times are parameters."""
    ids = row_ids("operation_id", count)
    titles = {task_type: wording(task_type, outcome).title for task_type in TASKS.names()}
    generic = wording("", outcome)
    source = select(
        per_row(OPS.c.id, ids, "notification_id"),
        OPS.c.owner_user_id,
        OPS.c.id,
        OPS.c.task_type,
        literal(outcome.value),
        case(titles, value=OPS.c.task_type, else_=generic.title),
        literal(generic.body),
        bindparam("now", type_=UtcDateTime),
    ).where(OPS.c.id.in_(ids))
    columns = ["id", "owner_user_id", "operation_id", "task_type", "outcome", "title", "body"]
    return insert(NOTIFICATIONS).from_select([*columns, "created_at"], source)


def insert_for_operations(
    tx: Tx, operation_ids: Sequence[str], outcome: OperationState, now: datetime
) -> None:
    """One notification per operation (distinct ids, any owners), in one statement."""
    if tx.owner_id is not None:
        raise ScopeViolation("notifications of many owners are written in the neutral scope")
    parameters: dict[str, Any] = {"now": now}
    for n, operation_id in enumerate(operation_ids):
        parameters[f"operation_id_{n}"] = operation_id
        parameters[f"notification_id_{n}"] = uuid.uuid4().hex
    tx.write(_insert_many_from_operations(outcome, len(operation_ids)), parameters)


_DELETE_FOR_OPERATIONS = delete(NOTIFICATIONS).where(
    NOTIFICATIONS.c.operation_id.in_(bindparam("operation_ids", expanding=True))
)


def delete_for_operations(tx: Tx, operation_ids: Sequence[str]) -> None:
    """The notifications of these operations (any owners: the neutral scope)."""
    if tx.owner_id is not None:
        raise ScopeViolation("notifications of many owners are removed in the neutral scope")
    tx.execute(_DELETE_FOR_OPERATIONS, {"operation_ids": list(operation_ids)})


_SHOWN = NOTIFICATIONS.c.dismissed_at.is_(None)
_UNREAD = NOTIFICATIONS.c.read_at.is_(None)
_VISIBLE = select(NOTIFICATIONS).where(_OWNED, _SHOWN)
_GET_VISIBLE = _VISIBLE.where(NOTIFICATIONS.c.id == bindparam("notification_id"))
_UNREAD_COUNT = select(func.count()).select_from(NOTIFICATIONS).where(_OWNED, _SHOWN, _UNREAD)
# The columns it sets are the parameters' (Core derives SET from them).
_SET = update(NOTIFICATIONS).where(NOTIFICATIONS.c.id == bindparam("notification_id"), _OWNED)
_MARK_ALL_READ = (
    update(NOTIFICATIONS)
    .where(_OWNED, _SHOWN, _UNREAD)
    .values(read_at=bindparam("now", type_=UtcDateTime))
)


def list_page(tx: Tx, *, size: int, token: str) -> Page[UserNotification]:
    return newest_first_page(
        tx, _VISIBLE, size, token, lambda row: UserNotification(**row), listing="notifications"
    )


def unread_count(tx: Tx) -> int:
    return int(tx.execute(_UNREAD_COUNT).scalar() or 0)


def _get_visible(tx: Tx, notification_id: str) -> UserNotification:
    key = {"notification_id": notification_id[: bounds.ID_MAX]}
    row = tx.execute(_GET_VISIBLE, key).one_or_none()
    if row is None:
        raise NotFound("notification not found", code="notification_not_found")
    return UserNotification(**row._mapping)


def _set(tx: Tx, notification: UserNotification, **values: datetime) -> UserNotification:
    tx.execute(_SET, {"notification_id": notification.id, **values})
    for name, value in values.items():
        setattr(notification, name, value)
    return notification


def mark_read(tx: Tx, notification_id: str, now: datetime) -> UserNotification:
    notification = _get_visible(tx, notification_id)
    if notification.read_at is None:
        return _set(tx, notification, read_at=now)
    return notification


def dismiss(tx: Tx, notification_id: str, now: datetime) -> UserNotification:
    notification = _get_visible(tx, notification_id)
    return _set(tx, notification, dismissed_at=now, read_at=notification.read_at or now)


def mark_all_read(tx: Tx, now: datetime) -> int:
    return tx.execute(_MARK_ALL_READ, {"now": now}).rowcount
