"""An owner's own transitions: cancel and retry (the operator acts through them too)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from durable_ops.model import lifecycle
from durable_ops.model.lifecycle import Event
from durable_ops.storage.operations import apply
from durable_ops.storage.operations.creation import SCOPE_OWNERS_TURN, next_turn
from durable_ops.storage.operations.reads import get
from durable_ops.storage.operations.rows import facts
from durable_ops.storage.schema import UserOperation
from durable_ops.storage.tx import Tx

May = Callable[[UserOperation], None]


def _any(_op: UserOperation) -> None:
    """Any caller in the owner's scope may: the scope already checked whose it is."""


def cancel(tx: Tx, operation_id: str, now: datetime, may_cancel: May = _any) -> UserOperation:
    """``may_cancel`` raises when the caller may not cancel this operation (its task type)."""
    return _owner_event(tx, operation_id, Event.CANCEL, now, may_cancel)


def retry(tx: Tx, operation_id: str, now: datetime, may_retry: May = _any) -> UserOperation:
    """``may_retry`` raises when the caller may not retry this operation (its task type).

    Queued again as new work of its owner (ADR 0065): at the priority it was created with,
    aged again from when it runs, and with a new turn as a create's (one held for later
    takes its turn when it joins the line, ADR 0056)."""
    return _owner_event(tx, operation_id, Event.RETRY, now, may_retry)


def _owner_event(tx: Tx, operation_id: str, event: Event, now: datetime, may: May) -> UserOperation:
    """Decide on the row read locked, write through ``apply``; answer the row as it is now."""
    op = get(tx, operation_id, lock=True)
    may(op)
    row = dict(op.__dict__)
    decision = lifecycle.decide(facts(row), event, now)
    if not decision.changed:
        return op
    values = {}
    if event is Event.RETRY:  # new work of its owner, at its own priority (ADR 0065)
        own = op.priority if op.base_priority is None else op.base_priority
        values = {"priority": own, "base_priority": None}
        if op.held_until is None:
            values["fair_tag"] = next_turn(tx, SCOPE_OWNERS_TURN, now, priority=own)
    change = apply.Change(row, event, decision, values)
    (written,) = apply.write(tx, [change], now)
    op.__dict__.update(written, updated_at=now)
    return op
