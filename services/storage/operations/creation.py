"""Creating an operation: one INSERT, deduplicated by the owner's idempotency key."""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import BindParameter, Select, bindparam, func, insert, select
from sqlalchemy.exc import IntegrityError

from durable_ops.model import bounds, fairness, lifecycle
from durable_ops.model.errors import KEY_USED_FOR_ANOTHER_REQUEST, Conflict
from durable_ops.model.retention import pruned
from durable_ops.model.states import Privacy
from durable_ops.storage import retention
from durable_ops.storage.events import Changed, publish
from durable_ops.storage.operations.reads import find_by_key
from durable_ops.storage.operations.rows import OPS, detached, in_line, new_id, recognise
from durable_ops.storage.schema import UserOperation
from durable_ops.storage.shares import SHARES
from durable_ops.storage.tx import SCOPE_OWNER, ScopeViolation, Tx


@dataclass(frozen=True)
class CreateRequest:
    task_type: str
    idempotency_key: str
    subject_type: str
    subject_id: str
    priority: int = 0
    max_attempts: int = 3
    retry_delay_seconds: int = bounds.DEFAULT_RETRY_DELAY_SECONDS
    privacy: Privacy = Privacy.LOCAL_ONLY
    deadline_at: datetime | None = None
    time_budget_seconds: int | None = None
    # Claimable from then, not before (ADR 0046); None: at once. At most 30 days ahead.
    not_before: datetime | None = None
    # What a per-key concurrency limit of the task type counts it under (ADR 0048), among
    # its owner's keys; empty: its subject id.
    concurrency_key: str = ""
    context_ref: str = ""
    # The creating request's W3C traceparent (tracing on), so later spans can link to it.
    trace_parent: str = ""

    def validate(self, now: datetime) -> None:
        bounds.task_type(self.task_type)
        bounds.idempotency_key(self.idempotency_key)
        bounds.subject(self.subject_type, self.subject_id)
        bounds.text("context_ref", self.context_ref, bounds.SUBJECT_ID_MAX, required=False)
        bounds.trace_parent(self.trace_parent)
        bounds.single_line(
            "concurrency_key", self.concurrency_key, bounds.SUBJECT_ID_MAX, required=False
        )
        bounds.int_range("priority", self.priority, bounds.PRIORITY_RANGE)
        bounds.int_range("max_attempts", self.max_attempts, bounds.MAX_ATTEMPTS_RANGE)
        bounds.int_range(
            "retry_delay_seconds", self.retry_delay_seconds, bounds.RETRY_DELAY_SECONDS_RANGE
        )
        if self.not_before is not None:
            bounds.not_before(self.not_before, now)
        if self.deadline_at is not None:
            bounds.deadline(self.deadline_at, now, self.not_before)

    def due(self, now: datetime) -> datetime:
        """When the operation becomes claimable: its ``not_before``, or ``now``."""
        return now if self.not_before is None else bounds.not_before(self.not_before, now)

    def fingerprint(self) -> str:
        """What makes two creates "the same request". The deadline is left out:
        a repeated click computes a later absolute deadline for the same work, and
        its own trace."""
        fields: dict[str, Any] = {name: getattr(self, name) for name in _FINGERPRINTED}
        # Each absent unless given: the fingerprints of earlier creates stay the same.
        if self.not_before is not None:
            fields["not_before"] = self.not_before.isoformat()
        if self.concurrency_key:
            fields["concurrency_key"] = self.concurrency_key
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


# What a fingerprint covers: every field of the request but these (asdict is slower).
_LEFT_OUT = {"idempotency_key", "deadline_at", "trace_parent", "not_before", "concurrency_key"}
_FINGERPRINTED = tuple(f for f in CreateRequest.__dataclass_fields__ if f not in _LEFT_OUT)
_COLUMNS = tuple(c.name for c in OPS.columns if c.name != "owner_user_id")
_BINDS = {name: bindparam(name, type_=OPS.c[name].type) for name in _COLUMNS}
# One statement: the row, unless the owner's key has a tombstone (its operation was pruned).
_INSERT = insert(OPS).from_select(
    ["owner_user_id", *_COLUMNS],
    select(SCOPE_OWNER, *_BINDS.values()).where(
        ~retention.tombstoned(_BINDS["task_type"], _BINDS["idempotency_key"])
    ),
)


def turn_inputs(owner: BindParameter[str]) -> Select[Any]:
    """What an owner's next turn is computed from: the head of its priority's due queue (the
    claim index's first row), the owner's last turn there, and the owner's share."""
    return select(
        select(OPS.c.fair_tag)
        .where(
            OPS.c.state == lifecycle.CREATED.state,
            in_line(),
            OPS.c.priority == bindparam("priority"),
            OPS.c.not_before <= bindparam("now"),
        )
        .order_by(OPS.c.fair_tag)
        .limit(1)
        .scalar_subquery()
        .label("head"),
        select(func.max(OPS.c.fair_tag))
        .where(OPS.c.owner_user_id == owner, OPS.c.priority == bindparam("priority"))
        .scalar_subquery()
        .label("owner_last"),
        select(SHARES.c.weight)
        .where(SHARES.c.owner_user_id == owner)
        .scalar_subquery()
        .label("share"),
    )


# The scope owner's next turn: a create's, and a manual retry's (``owner.retry``, ADR 0065).
SCOPE_OWNERS_TURN = turn_inputs(SCOPE_OWNER)


def next_turn(tx: Tx, inputs: Select[Any], now: datetime, **parameters: Any) -> int:
    """The owner's next turn at ``:priority`` (ADR 0049): one SELECT of three probes,
    ``turn_inputs``, whose labels are ``start_tag``'s arguments."""
    found = tx.execute(inputs, {**parameters, "now": now}).one()
    return fairness.start_tag(**found._mapping, now=now)


def create(
    tx: Tx, request: CreateRequest, now: datetime, *, fair: bool = True
) -> tuple[UserOperation, bool]:
    """Insert the operation, or return the one this owner already made with this key.

    ``fair`` (the default) gives it its owner's turn within its priority (ADR 0049), at
    the cost of one SELECT before the INSERT; without, its turn is its due time.

    The INSERT goes first, and a new key (the common case) costs that statement
    alone: it inserts nothing when the key has a tombstone (a pruned key is
    refused, ADR 0021), and only then is the tombstone read. The unique index
    refuses a repeated key, and only then is the existing row read. A refused
    INSERT undoes only itself on both engines, so the transaction goes on.
    """
    if tx.owner_id is None:
        raise ScopeViolation("operations are created in their owner's scope")
    request.validate(now)
    fingerprint = request.fingerprint()
    created = lifecycle.CREATED
    due = request.due(now)
    held = due > now
    if not fair:
        turn = fairness.fifo_tag(due)
    elif held:
        turn = fairness.HELD_TAG  # its turn is taken when it joins the line (sweeps)
    else:
        turn = next_turn(tx, SCOPE_OWNERS_TURN, now, priority=request.priority)
    values: dict[str, Any] = dict.fromkeys(_COLUMNS)
    values.update(
        id=new_id(),
        task_type=request.task_type,
        idempotency_key=request.idempotency_key,
        request_hash=fingerprint,
        subject_type=request.subject_type,
        subject_id=request.subject_id,
        context_ref=request.context_ref or None,
        trace_parent=request.trace_parent or None,
        state=created.state,
        priority=request.priority,
        attempt=created.attempt,
        max_attempts=request.max_attempts,
        retry_delay_seconds=request.retry_delay_seconds,
        time_budget_seconds=request.time_budget_seconds,
        privacy=request.privacy,
        progress_percent=0,
        cancel_requested=created.cancel_requested,
        next_attempt_at=created.next_attempt_at,
        deadline_at=request.deadline_at,
        created_at=now,
        not_before=due,
        held_until=due if held else None,  # out of the claim's line till then
        fair_tag=turn,
        concurrency_key=request.concurrency_key or None,
        updated_at=now,
        prompt_tokens=0,
        completion_tokens=0,
        model_ms=0,
        reserved_tokens=0,  # admission records its reservation after (storage.budgets)
    )
    try:
        inserted = tx.write(_INSERT, values)
    except IntegrityError:
        # This owner used the key before (or a concurrent identical create won the race).
        existing = find_by_key(tx, request.task_type, request.idempotency_key)
        if existing is None:
            raise
        if not hmac.compare_digest(existing.request_hash, fingerprint):
            raise Conflict(KEY_USED_FOR_ANOTHER_REQUEST) from None
        return existing, False
    if not inserted:  # the key's operation finished long ago and was pruned
        tombstone = retention.tombstone_for(tx, request.task_type, request.idempotency_key)
        if tombstone is None:  # forgotten since the INSERT looked: the key is free again
            return create(tx, request, now, fair=fair)
        if not hmac.compare_digest(tombstone.request_hash, fingerprint):
            raise Conflict(KEY_USED_FOR_ANOTHER_REQUEST)
        raise pruned(tombstone.final_state, tombstone.finished_at)
    operation_id, owner = values["id"], tx.owner_id
    recognise(operation_id)  # a fresh random id: only this INSERT wrote it
    publish(Changed(operation_id, created.state, request.task_type, owner_id=owner, scheduled=held))
    return detached({**values, "owner_user_id": owner}), True
