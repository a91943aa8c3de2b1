"""The one writer of every decided transition: ``lifecycle.decide`` said, this writes.

A settlement (complete, fail, fallback, acknowledged cancel), an owner's
cancel or retry and the sweeper's expiries and deadlines all end here, in
batches: one guarded UPDATE of the operations, each row given its own values
(``CASE id``); one UPDATE of the attempts the transitions end; one of each
owner's token-budget day they settle (ADR 0041); the notifications the
decisions remove and write; the concurrency slots the ended runs held (ADR 0048,
only for task types with limits). Its callers read the rows
locked (``FOR UPDATE``) before they decide, so the guard (the row still
carries the owner, state and ``updated_at`` it was decided on) always holds;
on Galera another node's write to the same row fails certification at
COMMIT instead, and the whole transaction is retried (``db``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import Update, bindparam, update

from durable_ops.model import budgets, lifecycle
from durable_ops.model.lifecycle import AttemptOutcome, Decision, Event
from durable_ops.model.states import OperationState
from durable_ops.model.usage import Usage
from durable_ops.storage import budgets as budget_store
from durable_ops.storage import drafts, notifications
from durable_ops.storage.events import Changed, publish
from durable_ops.storage.operations import history, slots
from durable_ops.storage.operations.rows import (
    OPS,
    S,
    attempt_id,
    batches,
    neutral,
    numbered,
    recognise,
)
from durable_ops.storage.per_row import per_row, row_ids
from durable_ops.storage.tx import Tx

# The operation's sums of its attempts' usage, and the attempt's own figures: same names.
USAGE_TOTALS = ("prompt_tokens", "completion_tokens", "model_ms")
# What the operation holds of its day's token budget (ADR 0041).
BUDGET = ("budget_day", "reserved_tokens")
# What a decided transition may write; every other column keeps its value.
WRITTEN = (
    "state",
    "attempt",
    "cancel_requested",
    "next_attempt_at",
    "lease_expires_at",
    "finished_at",
    "failure_code",
    "failure_message",
    "progress_percent",
    "result_ref",
    "provider",
    "model",
    "route",
    "lease_token_hash",
    "started_at",
    "deadline_at",
    *USAGE_TOTALS,
    *BUDGET,
    "slot_key",
)
# What a decision always says, of the columns it writes.
_DECIDED = ("state", "attempt", "cancel_requested", "next_attempt_at")
# What a manual retry clears (its progress goes back to 0): the run before it is forgotten.
_CLEARED_BY_RETRY = (
    "lease_token_hash",
    "lease_expires_at",
    "started_at",
    "finished_at",
    "failure_code",
    "failure_message",
    "result_ref",
)
# The guard: the row still is the one the decision was made on.
_AS_READ = ("owner_user_id", "state", "updated_at")


@dataclass(frozen=True)
class Change:
    """One decided transition: the row as read (locked), the event, the decision, what
    the event itself writes (a result, provenance, a failure) and the usage the settlement
    reported of the attempt it ends.

    The usage is written twice in the one UPDATE pair: as the ended attempt's own figures,
    and added to the operation's totals (ADR 0038). A transition that ends no attempt
    records none, so the totals are always the sum over the attempt rows.
    """

    row: Mapping[str, Any]
    event: Event
    decision: Decision
    values: Mapping[str, Any] = field(default_factory=dict)
    usage: Usage | None = None

    def written(self, now: datetime) -> dict[str, Any]:
        """Every ``WRITTEN`` column's new value."""
        decision = self.decision
        values = {name: self.row[name] for name in WRITTEN}
        values.update(self.values)
        values.update({name: getattr(decision, name) for name in _DECIDED})
        if decision.failure_code is not None:
            values["failure_code"] = decision.failure_code
            # The rules' own failure (a lease run out, a deadline passed) brings no message:
            # an earlier attempt's, left beside it, would explain another failure.
            values["failure_message"] = self.values.get("failure_message")
        if decision.state is not S.RUNNING:
            values["lease_expires_at"] = None
            values["slot_key"] = None  # its concurrency slots go back (``slots.release``)
        if decision.terminal:
            values["finished_at"] = now
        restart: lifecycle.Restart | None = None
        if self.event is Event.RETRY:
            # A new attempt budget, and the deadline it runs under; it runs at its time
            # (``held_until``, ADR 50, is left as it is), and waits from then as new work
            # does (ADR 65): else aging counted its wait from a ``not_before`` long past.
            restart = lifecycle.restart(
                now=now,
                not_before=self.row["not_before"],
                time_budget_seconds=self.row["time_budget_seconds"],
                deadline_at=self.row["deadline_at"],
            )
            values.update(dict.fromkeys(_CLEARED_BY_RETRY), deadline_at=restart.deadline_at)
            values["not_before"] = restart.runs_at
            values["progress_percent"] = 0
        charged = self._charged()
        if charged is not None:
            values.update({name: self.row[name] + getattr(charged, name) for name in USAGE_TOTALS})
        settled = self._settled()
        if settled is not None:
            values["reserved_tokens"] = settled.outstanding
            if restart is not None:  # a manual retry spends from the day it runs
                values["budget_day"] = budgets.budget_day(restart.runs_at)
        return values

    def _settled(self) -> budgets.Settled | None:
        """What this transition does to the operation's token budget: the ended attempt's
        tokens spent, the reservation released when the operation ends (ADR 0041); None
        for an operation admission reserved nothing for."""
        if self.row["budget_day"] is None:
            return None
        charged = self._charged()
        return budgets.settle(
            outstanding=self.row["reserved_tokens"],
            tokens=0 if charged is None else charged.tokens,
            ends=self.decision.state.is_terminal,
        )

    def budget_charge(self) -> budget_store.Charge | None:
        """The owner's day this transition charges, if it moves anything."""
        settled = self._settled()
        if settled is None or not settled.moves:
            return None
        return budget_store.Charge(
            self.row["owner_user_id"], self.row["budget_day"], settled.reserved, settled.spent
        )

    def _outcome(self) -> AttemptOutcome | None:
        if self.row["lease_token_hash"] is None:
            return None
        return lifecycle.attempt_outcome(S(self.row["state"]), self.event, self.decision)

    def _charged(self) -> Usage | None:
        """The usage recorded by this transition: the settlement's, if it ends an attempt."""
        return self.usage if self._outcome() is not None else None

    def published(self) -> Changed:
        """What this process's waiters learn of it after COMMIT."""
        decision = self.decision
        asked = decision.cancel_requested and not self.row["cancel_requested"]
        return Changed(
            self.row["id"],
            decision.state,
            self.row["task_type"],
            cancel_asked=asked and decision.state is S.RUNNING,
            owner_id=self.row["owner_user_id"],
        )

    def slot_given_back(self) -> tuple[str, str] | None:
        """(task type, key slot or "") of the concurrency slots this transition's run held
        and gives back (ADR 0048); None when it held none or keeps running."""
        held = self.row["slot_key"]
        if held is None or self.decision.state is S.RUNNING:
            return None
        return self.row["task_type"], held

    def ending(self) -> dict[str, Any] | None:
        """How the attempt this transition ends ended, or None when it ends none."""
        outcome = self._outcome()
        if outcome is None:
            return None
        charged = self._charged()
        return {
            "attempt_id": attempt_id(self.row["lease_token_hash"]),
            "outcome": outcome,
            "failure_code": self.decision.failure_code or self.values.get("failure_code"),
            **{name: self.values.get(name) for name in ("failure_message", "provider", "model")},
            "lease_expires_at": self.row["lease_expires_at"],
            **{name: None if charged is None else getattr(charged, name) for name in USAGE_TOTALS},
        }


@cache
def _update(count: int, extra: tuple[str, ...] = ()) -> Update:
    """One UPDATE of ``count`` rows, each guarded on and given its own values, of
    ``WRITTEN`` and the ``extra`` columns."""
    ids = row_ids("id", count)

    def own(name: str, column: str) -> Any:
        return per_row(OPS.c.id, ids, name, OPS.c[column].type)

    return (
        update(OPS)
        .where(OPS.c.id.in_(ids), *(OPS.c[name] == own(f"was_{name}", name) for name in _AS_READ))
        .values(
            updated_at=bindparam("now"), **{name: own(name, name) for name in (*WRITTEN, *extra)}
        )
    )


def write(tx: Tx, changes: Sequence[Change], now: datetime) -> list[dict[str, Any]]:
    """Write ``changes`` (distinct operations, any owners in the neutral scope, the scope
    owner's in an owner scope); answer each one's written columns, in order."""
    if not changes:
        return []
    tx = neutral(tx, [change.row["owner_user_id"] for change in changes])
    written = [change.written(now) for change in changes]
    # What a manual retry writes besides (its time, priority and turn: ADR 65), as read in
    # the other rows of its batch; the settlements' statement has none.
    extra = tuple(sorted({name for values in written for name in values}.difference(WRITTEN)))
    each = [
        {
            "id": change.row["id"],
            **{f"was_{name}": change.row[name] for name in _AS_READ},
            **{name: change.row[name] for name in extra},
            **values,
        }
        for change, values in zip(changes, written, strict=True)
    ]
    for part in batches(each):
        matched = tx.write(_update(len(part), extra), numbered(part, now=now))
        if matched != len(part):  # unreachable while the rows are locked
            raise RuntimeError(f"wrote {matched} of the {len(part)} operations read locked")
    first_change = changes[0]
    recognise(first_change.row["id"], state=first_change.decision.state, updated_at=now)
    history.end(tx, [ending for change in changes if (ending := change.ending())], now)
    budget_store.charge(tx, [charge for change in changes if (charge := change.budget_charge())])
    slots.release(tx, [held for change in changes if (held := change.slot_given_back())])
    for change in changes:
        publish(change.published())
    ended = [change.row["id"] for change in changes if change.decision.state.is_terminal]
    drafts.discard(tx, ended)  # the answer so far is the note now, or nothing
    removed = [change.row["id"] for change in changes if change.decision.remove_notification]
    if removed:
        notifications.delete_for_operations(tx, removed)
    notified: dict[OperationState, list[str]] = defaultdict(list)
    for change in changes:
        if change.decision.notify:
            notified[change.decision.state].append(change.row["id"])
    for state, operation_ids in notified.items():
        notifications.insert_for_operations(tx, operation_ids, state, now)
    return written
