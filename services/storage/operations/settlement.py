"""Settling leases: complete, fail, hand to the external route, acknowledge a cancel,
release (a stopping worker hands the operation back, queued, its attempt not spent).

One writer for all five outcomes, as River's ``JobSetStateIfRunningMany``: the
named operations are read locked in one statement, each settlement is checked
on its own (the operation is its owner's, the token is its lease's, and
``decide`` allows the event now), and every change is written by
``apply.write``, with the usage the worker reported of the attempt it ends.
A refused settlement is answered alone with its error and the rest commit:
nothing is written before all are decided; one refused as a lost lease still has
its usage charged (``late_usage``). A single settlement (the single-operation RPCs)
is a batch of one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from durable_ops.model import bounds, lifecycle
from durable_ops.model.errors import (
    DomainError,
    InvalidArgument,
    LeaseLost,
    UsageCharged,
    refusal_raised,
)
from durable_ops.model.lifecycle import Event
from durable_ops.model.states import OperationState
from durable_ops.model.usage import Usage
from durable_ops.storage.operations import apply, late_usage
from durable_ops.storage.operations.rows import (
    LOCKED,
    ROWS_MAX,
    facts,
    hash_token,
    held_row,
    neutral,
)
from durable_ops.storage.tx import Tx

SETTLING = lifecycle.WORKER_EVENTS - {Event.HEARTBEAT}  # every end a lease holder reports
_FAILING = frozenset({Event.FAIL_RETRYABLE, Event.FAIL_PERMANENT})


@dataclass(frozen=True)
class Provenance:
    provider: str = ""
    model: str = ""
    route: str = ""

    def values(self) -> dict[str, str | None]:
        bounds.provenance(self.provider, self.model, self.route)
        return {name: getattr(self, name) or None for name in ("provider", "model", "route")}


@dataclass(frozen=True)
class Settlement:
    """How the holder of one lease ends it."""

    owner_id: str
    operation_id: str
    token: str
    event: Event
    provenance: Provenance = Provenance()
    result_ref: str = ""
    failure_code: str = ""
    failure_message: str = ""
    # What the attempt's model calls used, whatever the outcome (a release and an
    # acknowledged cancel too: tokens spent before the stop are spent). None: not reported.
    usage: Usage | None = None
    # A retryable failure's earliest next attempt, counted from now (a model's Retry-After):
    # ``decide`` reads it. None: the operation's own retry wait alone.
    retry_after: timedelta | None = None

    def values(self) -> dict[str, Any]:
        """What the outcome writes beside the decision; refuses a bad field."""
        bounds.owner_id(self.owner_id)
        if self.event not in SETTLING:
            raise InvalidArgument("event", "does not settle a lease")
        if self.retry_after is not None:
            if self.event is not Event.FAIL_RETRYABLE:
                raise InvalidArgument("retry_after", "is only for a retryable failure")
            bounds.retry_after(self.retry_after)
        if self.usage is not None:
            self.usage.checked()
        if self.event in (Event.ACKNOWLEDGE_CANCEL, Event.RELEASE):
            return {}  # a release keeps the progress: the next attempt resumes from it
        values: dict[str, Any] = self.provenance.values()
        if self.event is Event.COMPLETE:
            bounds.text("result_ref", self.result_ref, bounds.SUBJECT_ID_MAX, required=False)
            values.update(
                progress_percent=bounds.PROGRESS_RANGE[1], result_ref=self.result_ref or None
            )
        elif self.event in _FAILING:
            bounds.failure(self.failure_code, self.failure_message)
            values.update(
                failure_code=self.failure_code, failure_message=self.failure_message or None
            )
        return values


def settle(
    tx: Tx, settlements: Sequence[Settlement], now: datetime
) -> list[OperationState | DomainError]:
    """Settle many leases of many owners (the neutral scope), or of the scope's owner;
    answer each settlement alone, in order: the state it leaves, or why it was refused."""
    bounds.int_range("items", len(settlements), (1, ROWS_MAX))
    neutral_tx = neutral(tx, [item.owner_id for item in settlements])
    ids = sorted({item.operation_id for item in settlements})
    rows: dict[str, dict[str, Any]] = {
        row.id: dict(row._mapping) for row in neutral_tx.execute(LOCKED, {"ids": ids})
    }
    answers: list[OperationState | DomainError] = []
    changes: dict[str, apply.Change] = {}  # apply writes a row once: by operation id
    lost: list[tuple[int, Settlement, Usage, str]] = []  # lost leases' settlements with usage
    for item in settlements:
        event, retry_after = item.event, item.retry_after
        try:
            values = item.values()
            row = held_row(rows.get(item.operation_id), item.owner_id, hash_token(item.token))
            if item.usage is not None and lifecycle.lease_expired(facts(row), now):
                # Its lease ran out and the sweeper has not ended it yet: ended here as the
                # sweeper would, with the usage the sweeper cannot know.
                event, values, retry_after = Event.SWEEP, {}, None
            decision = lifecycle.decide(facts(row), event, now, retry_after=retry_after)
        except LeaseLost as refused:
            if item.usage is not None:
                lost.append((len(answers), item, item.usage, refused.message))
            answers.append(refused)
            continue
        except DomainError as refused:
            answers.append(refused)
            continue
        if decision.changed and item.operation_id in changes:
            # A second change of one lease waits for its own batch.
            answers.append(LeaseLost("the lease was settled earlier in this batch"))
            continue
        if decision.changed:
            change = apply.Change(row, event, decision, values, item.usage)
            changes[item.operation_id] = change
            # A second settlement of the same lease in this batch sees this one's outcome.
            rows[item.operation_id] = {**row, **change.written(now)}
        answers.append(
            _charged("the lease has expired") if event is not item.event else decision.state
        )
    apply.write(neutral_tx, list(changes.values()), now)
    for index, item, usage, why in lost:
        if late_usage.charge(neutral_tx, item.operation_id, item.token, usage):
            answers[index] = _charged(why)
    return answers


def _charged(why: str) -> UsageCharged:
    return UsageCharged(f"{why}; the usage it reports is charged all the same")


def settle_one(tx: Tx, settlement: Settlement, now: datetime) -> OperationState:
    """One settlement, its refusal raised."""
    return refusal_raised(settle(tx, [settlement], now)[0])
