"""All SQL of the notification aggregate.

The terminal notification is written by the same transaction that moves the
operation (``insert_for_operation``), as one ``INSERT … SELECT`` so that a
completion costs one UPDATE and one INSERT. The wording comes from the model
and names only the kind of work and its outcome.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import Select, case, delete, func, insert, literal, select, update
from sqlalchemy.orm import Session

from services.model.errors import NotFound
from services.model.notifications import wording
from services.model.states import OperationState
from services.model.tasks import AI_TASKS
from services.storage.pages import Page, newest_first, page_size, paginate
from services.storage.schema import UserNotification, UserOperation, UtcDateTime


def insert_for_operation(
    session: Session, operation_id: str, outcome: OperationState, now: datetime
) -> None:
    titles = {task_type: wording(task_type, outcome).title for task_type in AI_TASKS}
    generic = wording("", outcome)
    source = select(
        literal(uuid.uuid4().hex),
        UserOperation.owner_user_id,
        UserOperation.id,
        UserOperation.task_type,
        literal(outcome.value),
        case(titles, value=UserOperation.task_type, else_=generic.title),
        literal(generic.body),
        literal(now, UtcDateTime),
    ).where(UserOperation.id == operation_id)
    columns = ["id", "owner_user_id", "operation_id", "task_type", "outcome", "title", "body"]
    session.execute(insert(UserNotification).from_select([*columns, "created_at"], source))


def delete_for_operation(session: Session, operation_id: str) -> None:
    session.execute(
        delete(UserNotification)
        .where(UserNotification.operation_id == operation_id)
        .execution_options(synchronize_session=False)
    )


def _visible() -> Select[Any]:
    return select(UserNotification).where(UserNotification.dismissed_at.is_(None))


def list_page(session: Session, *, size: int, token: str) -> Page[UserNotification]:
    size = page_size(size)
    query = newest_first(_visible(), UserNotification.created_at, UserNotification.id, token, size)
    rows = session.scalars(query).all()
    return paginate(rows, size, lambda n: (n.created_at, n.id))


def unread_count(session: Session) -> int:
    query = (
        select(func.count())
        .select_from(UserNotification)
        .where(UserNotification.dismissed_at.is_(None), UserNotification.read_at.is_(None))
    )
    return int(session.scalar(query) or 0)


def _get_visible(session: Session, notification_id: str) -> UserNotification:
    found: UserNotification | None = session.scalars(
        _visible().where(UserNotification.id == notification_id[:64])
    ).one_or_none()
    if found is None:
        raise NotFound("notification not found", code="notification_not_found")
    return found


def mark_read(session: Session, notification_id: str, now: datetime) -> UserNotification:
    notification = _get_visible(session, notification_id)
    if notification.read_at is None:
        notification.read_at = now
    return notification


def dismiss(session: Session, notification_id: str, now: datetime) -> UserNotification:
    notification = _get_visible(session, notification_id)
    notification.dismissed_at = now
    if notification.read_at is None:
        notification.read_at = now
    return notification


def mark_all_read(session: Session, now: datetime) -> int:
    statement = (
        update(UserNotification)
        .where(UserNotification.read_at.is_(None), UserNotification.dismissed_at.is_(None))
        .values(read_at=now)
        .execution_options(synchronize_session=False)
    )
    return session.execute(statement).rowcount  # type: ignore[attr-defined,no-any-return]
