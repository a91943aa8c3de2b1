"""The sweeper's transitions: leases that ran out, deadlines that passed, retries now due;
scheduled operations let into the claim's line at their time (ADR 0050); and the aging of
queued priorities (``aging``, ADR 0049).

The rows are read locked, skipping rows a claim or a settlement holds (the
next sweep finds them if they are still due), decided (``Event.SWEEP``) and
written by ``apply``, in batches of ``ROWS_MAX``; the sweeper calls again
while a sweep found a full batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Select, bindparam, select, update

from durable_ops.model import lifecycle
from durable_ops.model.lifecycle import Event
from durable_ops.model.states import PENDING_STATES
from durable_ops.storage.events import Requeued, publish
from durable_ops.storage.operations import aging, apply
from durable_ops.storage.operations.creation import next_turn, turn_inputs
from durable_ops.storage.operations.rows import OPS, ROWS_MAX, S, deadline_open, facts
from durable_ops.storage.tx import ScopeViolation, Tx


def _due(*where: Any) -> Select[Any]:
    # No ORDER BY: a SKIP LOCKED read never waits, so it needs no lock order, and the
    # state index alone finds the rows (ordering by id could walk the primary key instead).
    return select(OPS).where(*where).limit(ROWS_MAX).with_for_update(skip_locked=True)


_EXPIRED_LEASES = _due(OPS.c.state == S.RUNNING, OPS.c.lease_expires_at <= bindparam("now"))
_PAST_DEADLINE = _due(OPS.c.state.in_([state.value for state in PENDING_STATES]), ~deadline_open())
_PROMOTE_DUE_RETRIES = (
    update(OPS)
    .where(
        OPS.c.state == lifecycle.REQUEUE.source,
        OPS.c.next_attempt_at <= bindparam("now"),
        deadline_open(),  # a retry due after its deadline is failed above, never requeued
    )
    # The attempt is not written: REQUEUE does not start one (a test ties the two). It keeps
    # its turn and levels (ADR 49) and waits in line from now, as a manual retry does (ADR
    # 65): else aging counted its run and its retry delay as a wait in line, and the queues'
    # "due since" (``operator.queue_depths``) its creation.
    .values(
        state=lifecycle.REQUEUE.target,
        next_attempt_at=None,
        not_before=bindparam("now"),
        updated_at=bindparam("now"),
    )
)
# A seek on the claim index's first two columns: the held rows now due, not every held one.
_HELD_NOW_DUE = (
    select(OPS.c.id, OPS.c.owner_user_id, OPS.c.priority, OPS.c.not_before)
    .where(OPS.c.state == lifecycle.CREATED.state, OPS.c.held_until <= bindparam("now"))
    .limit(ROWS_MAX)
    .with_for_update(skip_locked=True)
)
_OWNERS_TURN = turn_inputs(bindparam("owner"))
# Nothing the owner sees changes (the operation was and stays queued): no ``updated_at``.
_INTO_LINE = (
    update(OPS)
    .where(OPS.c.id == bindparam("operation_id"), OPS.c.held_until.is_not(None))
    .values(held_until=None, fair_tag=bindparam("turn"))
)


@dataclass
class SweepReport:
    expired_leases: int = 0
    deadlines: int = 0
    promoted: int = 0  # due retries queued again, and scheduled operations now in line
    aged: int = 0  # queued operations whose priority rose with their wait (ADR 0049)
    let_in: int = 0  # of ``promoted``, the scheduled operations now in line

    @property
    def total(self) -> int:
        return self.expired_leases + self.deadlines + self.promoted + self.aged

    @property
    def full(self) -> bool:
        """A batch was full: more may be due now."""
        return max(self.expired_leases, self.deadlines, self.let_in) >= ROWS_MAX


def sweep(tx: Tx, now: datetime) -> SweepReport:
    """Expire leases, fail passed deadlines closed, make due retries and scheduled
    operations claimable."""
    if tx.owner_id is not None:
        raise ScopeViolation("the sweeper runs in the neutral scope")
    report = SweepReport(
        expired_leases=_sweep(tx, _EXPIRED_LEASES, now),
        deadlines=_sweep(tx, _PAST_DEADLINE, now),
        promoted=tx.write(_PROMOTE_DUE_RETRIES, {"now": now}),
    )
    report.let_in = _let_due_into_line(tx, now)
    report.promoted += report.let_in
    report.aged = aging.age(tx, now)
    if report.promoted:
        publish(Requeued())
    return report


def _let_due_into_line(tx: Tx, now: datetime) -> int:
    """Each scheduled operation now due joins its priority's line with its owner's turn
    there, as a create now would give it (ADR 0056), earliest due first: one read and
    one write per operation, so a thousand due at once join in ten sweeps."""
    due = sorted(tx.execute(_HELD_NOW_DUE, {"now": now}), key=lambda row: (row.not_before, row.id))
    for row in due:
        turn = next_turn(tx, _OWNERS_TURN, now, owner=row.owner_user_id, priority=row.priority)
        tx.write(_INTO_LINE, {"operation_id": row.id, "turn": turn})
    return len(due)


def _sweep(tx: Tx, due: Select[Any], now: datetime) -> int:
    changes = []
    for found in tx.execute(due, {"now": now}):
        row = dict(found._mapping)
        decision = lifecycle.decide(facts(row), Event.SWEEP, now)
        if decision.changed:
            changes.append(apply.Change(row, Event.SWEEP, decision))
    apply.write(tx, changes, now)
    return len(changes)
