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
from typing import cast

from sqlalchemy import ColumnElement, Select, Table, bindparam, func, select, update

from durable_ops.storage.operations import each_active_state, in_line
from durable_ops.storage.schema import GLOBAL_CONTROL_ID, AiAdmissionControl, UserOperation
from durable_ops.storage.tx import SCOPE_OWNER, Tx

CONTROL = cast(Table, AiAdmissionControl.__table__)
OPS = cast(Table, UserOperation.__table__)
_LOCK = select(CONTROL).where(CONTROL.c.id == GLOBAL_CONTROL_ID).with_for_update()
_AI_ENABLED = select(CONTROL.c.ai_enabled).where(CONTROL.c.id == GLOBAL_CONTROL_ID)
_CONTROL = update(CONTROL).where(CONTROL.c.id == GLOBAL_CONTROL_ID)
_RESERVE = _CONTROL.values(reservations=CONTROL.c.reservations + 1)
_OF_TYPES = OPS.c.task_type.in_(bindparam("task_types", expanding=True))


def _count_active(*where: ColumnElement[bool]) -> Select[int]:
    """Active and due: an analysis scheduled for later takes no capacity until its time, or
    any user could hold every slot for a month (the claim's concurrency limits, ADR 0048,
    still bound what runs at once when many come due together)."""
    active = each_active_state(
        lambda state: select(OPS.c.id).where(OPS.c.state == state, in_line(), *where)
    )
    return select(func.count()).select_from(active.subquery())


_ACTIVE = _count_active(_OF_TYPES)
# A seek of ix_user_operations_owner_state, which holds held_until: no row is read.
_ACTIVE_FOR_OWNER = _count_active(OPS.c.owner_user_id == SCOPE_OWNER, _OF_TYPES)


def lock_control(tx: Tx) -> AiAdmissionControl:
    """Take the admission lock; the row also carries the live global AI switch."""
    row = tx.execute(_LOCK).one_or_none()
    if row is None:
        raise RuntimeError("ai_admission_control has no global row: run `opsctl migrate`")
    return AiAdmissionControl(**row._mapping)


def ai_enabled(tx: Tx) -> bool:
    """The live global AI switch, read without the admission lock: a look that waits for
    no admission (``opsctl status``)."""
    found = tx.execute(_AI_ENABLED).scalar_one_or_none()
    if found is None:
        raise RuntimeError("ai_admission_control has no global row: run `opsctl migrate`")
    return bool(found)


def reserve(tx: Tx) -> None:
    """Write the control row in the reserving transaction: the conflict Galera certifies."""
    tx.execute(_RESERVE)


def active_for_owner(tx: Tx, task_types: Iterable[str]) -> int:
    """Counted in the owner scope: the scope's owner's only."""
    return int(tx.execute(_ACTIVE_FOR_OWNER, {"task_types": list(task_types)}).scalar_one())


def active_for_everyone(tx: Tx, task_types: Iterable[str]) -> int:
    """The one cross-owner read admission needs: a count over the table, no rows."""
    everyone = tx.across_owners()
    return int(everyone.execute(_ACTIVE, {"task_types": list(task_types)}).scalar_one())


def set_ai_enabled(tx: Tx, enabled: bool, now: datetime) -> None:
    lock_control(tx)
    tx.execute(_CONTROL, {"ai_enabled": enabled, "updated_at": now})
