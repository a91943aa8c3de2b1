"""Daily token budgets on the database (issue 36, point 3; ADR 0041).

``token_budget_days`` keeps, per owner and UTC day, the tokens reserved by running
analyses and spent by ended attempts. Admission reserves in the transaction that
holds the admission lock (``capacity.lock_control``) and writes the control row, so
every admission, on any replica or Galera node, sees the reservations before it; the
owner's row is written with one guarded UPDATE that refuses past the limit. The global
budget is the day's sum over the owners' rows, counted under the same lock: no single
row that every settlement would have to write.

The transition writer (``operations.apply``) charges settlements here (``charge``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import cast

from sqlalchemy import Table, bindparam, delete, func, insert, select, update

from durable_ops.model import budgets
from durable_ops.model.budgets import DayUse
from durable_ops.model.states import Plan
from durable_ops.storage.schema import OwnerTokenBudget, TokenBudgetDay, UserOperation
from durable_ops.storage.tx import SCOPE_OWNER, Tx

DAYS = cast(Table, TokenBudgetDay.__table__)
OVERRIDES = cast(Table, OwnerTokenBudget.__table__)
OPS = cast(Table, UserOperation.__table__)

_OWNER_DAY = (DAYS.c.owner_user_id == SCOPE_OWNER, DAYS.c.day == bindparam("on_day"))
_TAKE = (
    update(DAYS)
    .where(*_OWNER_DAY, DAYS.c.reserved + DAYS.c.spent + bindparam("tokens") <= bindparam("limit"))
    .values(reserved=DAYS.c.reserved + bindparam("tokens"))
)
_READ_DAY = select(DAYS.c.reserved, DAYS.c.spent).where(*_OWNER_DAY)
_EVERYONE = select(
    func.coalesce(func.sum(DAYS.c.reserved), 0).label("reserved"),
    func.coalesce(func.sum(DAYS.c.spent), 0).label("spent"),
).where(DAYS.c.day == bindparam("on_day"))
# An INSERT's other columns are its parameters' (Core derives them).
_OPENED = insert(DAYS).values(reserved=0, spent=0)
_OPEN_OWN = _OPENED.values(owner_user_id=SCOPE_OWNER)
_CHARGE = (
    update(DAYS)
    .where(DAYS.c.owner_user_id == bindparam("owner"), DAYS.c.day == bindparam("on_day"))
    .values(
        reserved=DAYS.c.reserved + bindparam("reserved_delta"),
        spent=DAYS.c.spent + bindparam("spent_delta"),
    )
)
_RESERVED_ON = (
    update(OPS)
    .where(OPS.c.id == bindparam("operation_id"), OPS.c.owner_user_id == SCOPE_OWNER)
    .values(budget_day=bindparam("on_day"), reserved_tokens=bindparam("tokens"))
)
DAYS_KEPT = 31
_OLD_DAYS = delete(DAYS).where(DAYS.c.day < bindparam("before"))
_OVERRIDE = select(OVERRIDES.c.daily_tokens).where(OVERRIDES.c.owner_user_id == SCOPE_OWNER)
_CLEAR_OVERRIDE = delete(OVERRIDES).where(OVERRIDES.c.owner_user_id == SCOPE_OWNER)
_SET_OVERRIDE = insert(OVERRIDES).values(owner_user_id=SCOPE_OWNER)


@dataclass(frozen=True)
class BudgetView:
    """The owner's budget today, as the settings page shows it."""

    limit: int
    reserved: int
    spent: int
    renews_at: datetime


@dataclass(frozen=True)
class Charge:
    """One settlement's effect on one owner's day (``model.budgets.settle``)."""

    owner: str
    day: date
    reserved_delta: int
    spent_delta: int


def owner_limit(tx: Tx, plan: Plan) -> int:
    """The scope owner's daily budget: the operator's (``set_override``), else the plan's."""
    return budgets.daily_limit(plan, tx.execute(_OVERRIDE).scalar())


def set_override(tx: Tx, daily_tokens: int | None, *, set_by: str, now: datetime) -> None:
    """Set the scope's owner's daily budget, or (None) give it back its plan's."""
    tx.write(_CLEAR_OVERRIDE, {})
    if daily_tokens is not None:
        row = {"daily_tokens": daily_tokens, "set_by": set_by, "updated_at": now}
        tx.write(_SET_OVERRIDE, row)


def day_use(tx: Tx, day: date) -> DayUse:
    row = tx.execute(_READ_DAY, {"on_day": day}).first()
    return DayUse() if row is None else DayUse(int(row.reserved), int(row.spent))


def everyone_use(tx: Tx, day: date) -> DayUse:
    """The day's use summed over every owner: the one cross-owner read the global budget
    needs, a sum over the day's rows (indexed by day)."""
    summed = tx.across_owners().execute(_EVERYONE, {"on_day": day}).one()._mapping
    return DayUse(int(summed["reserved"]), int(summed["spent"]))


def reserve(tx: Tx, *, tokens: int, limit: int, day: date, now: datetime) -> None:
    """Reserve ``tokens`` of the scope owner's ``day``, or refuse (429) past ``limit``."""
    taken = {"on_day": day, "tokens": tokens, "limit": limit}
    if not tx.write(_TAKE, taken):
        tx.insert_if_absent(_OPEN_OWN, {"day": day})  # first admissions may race
        if not tx.write(_TAKE, taken):
            used = day_use(tx, day).used  # read only to say why
            raise budgets.exhausted(now, day, limit=limit, used=used, needed=tokens)


def reserved_for(tx: Tx, operation_id: str, *, tokens: int, day: date) -> None:
    """Record on the operation what it holds of which day (the settlement's to release)."""
    tx.write(_RESERVED_ON, {"operation_id": operation_id, "on_day": day, "tokens": tokens})


def prune_old_days(tx: Tx, today: date) -> int:
    """Every owner's day rows older than ``DAYS_KEPT`` days, deleted (admission and the
    settings page read today's; the rest is history an operator may look back on)."""
    before = today - timedelta(days=DAYS_KEPT)
    return tx.across_owners().execute(_OLD_DAYS, {"before": before}).rowcount


def charge(tx: Tx, charges: Iterable[Charge]) -> None:
    """Apply settlements' charges, in the transaction that ends their attempts (any
    owners: the caller's neutral scope). One UPDATE per owner and day, in one order."""
    summed: dict[tuple[str, date], list[int]] = {}
    for one in charges:
        deltas = summed.setdefault((one.owner, one.day), [0, 0])
        deltas[0] += one.reserved_delta
        deltas[1] += one.spent_delta
    for (owner, day), (reserved_delta, spent_delta) in sorted(summed.items()):
        if reserved_delta == 0 and spent_delta == 0:
            continue
        written: dict[str, object] = {"owner": owner, "on_day": day}
        written.update(reserved_delta=reserved_delta, spent_delta=spent_delta)
        if not tx.write(_CHARGE, written):
            # A manual retry moved the operation to a day it has no row for yet: open it.
            tx.insert_if_absent(_OPENED, {"owner_user_id": owner, "day": day})
            tx.write(_CHARGE, written)


def view(tx: Tx, plan: Plan, now: datetime) -> BudgetView:
    used = day_use(tx, budgets.budget_day(now))
    return BudgetView(owner_limit(tx, plan), used.reserved, used.spent, budgets.renews_at(now))
