"""The database capacity reservation of AI admission.

Admission locks the single ``ai_admission_control`` row before it counts, so
every admission replica serialises on it: the count it reads cannot change
until it has inserted (or refused) and committed. SQLite gets the same
serialisation from ``BEGIN IMMEDIATE``.

On a Galera cluster a row lock holds on its own node only, so a reservation
also writes the control row (``reserve``): two admissions through two nodes
then write the same row, certification lets the first commit and makes the
other fail with 1213, and the retried transaction counts again (ADR 0017).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from durable_ops.model.states import ACTIVE_STATES
from durable_ops.storage.schema import GLOBAL_CONTROL_ID, AiAdmissionControl, UserOperation

_ACTIVE = [state.value for state in ACTIVE_STATES]


def lock_control(session: Session) -> AiAdmissionControl:
    """Take the admission lock; the row also carries the live global AI switch."""
    control = session.scalars(
        select(AiAdmissionControl)
        .where(AiAdmissionControl.id == GLOBAL_CONTROL_ID)
        .with_for_update()
    ).one_or_none()
    if control is None:
        raise RuntimeError("ai_admission_control has no global row: run `opsctl migrate`")
    return control


def reserve(session: Session) -> None:
    """Write the control row in the reserving transaction: the conflict Galera certifies."""
    session.execute(
        update(AiAdmissionControl)
        .where(AiAdmissionControl.id == GLOBAL_CONTROL_ID)
        .values(reservations=AiAdmissionControl.reservations + 1)
    )


def active_for_owner(session: Session, task_types: Iterable[str]) -> int:
    """Counted in the owner scope: the owner filter applies."""
    query = (
        select(func.count())
        .select_from(UserOperation)
        .where(UserOperation.task_type.in_(list(task_types)), UserOperation.state.in_(_ACTIVE))
    )
    return int(session.scalar(query) or 0)


def active_for_everyone(session: Session, task_types: Iterable[str]) -> int:
    """The one cross-owner read admission needs: a count over the table, no rows."""
    table = UserOperation.__table__
    query = (
        select(func.count())
        .select_from(table)
        .where(table.c.task_type.in_(list(task_types)), table.c.state.in_(_ACTIVE))
    )
    return int(session.scalar(query) or 0)


def set_ai_enabled(session: Session, enabled: bool, now: datetime) -> None:
    control = lock_control(session)
    control.ai_enabled = enabled
    control.updated_at = now
