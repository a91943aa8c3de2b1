"""The claim: the best claimable rows, each under a fresh lease token.

Three statements for a batch: ``SELECT … ORDER BY priority DESC, fair_tag,
not_before LIMIT n FOR UPDATE SKIP LOCKED`` per task type the claim names
walks that type's part of the claim index (ADRs 0001, 0046, 0049, 0051), so
concurrent claims take different rows instead of queueing on the head of the
queue, and a backlog of a type the claim does not name is never read; a claim
of several types is one statement, the ``UNION ALL`` of those SELECTs, ordered
and limited again; one UPDATE of the rows it locked, each given its own token hash
(``CASE id``); one multi-row INSERT of their attempts. Only the hash of a
token is stored. (SQLite has no row locks: its writers hold the database lock
from ``BEGIN IMMEDIATE``, so the same statements are safe.)

On Galera row locks do not reach other nodes, and claims through several
nodes that all took the head of the queue would fail certification (1213)
all but one (ADR 0017). There the candidates are picked at random among the
first ``CLAIM_SPREAD`` claimable rows of the top priority: the ordering
promise becomes "never a lower priority while a higher one is claimable, and
within a priority one of the oldest few". Only the choice of rows differs;
the take is the same.
"""

from __future__ import annotations

import random
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Row,
    Select,
    Update,
    bindparam,
    func,
    select,
    update,
)

from durable_ops.model import bounds, lifecycle
from durable_ops.model.concurrency_limits import Concurrency
from durable_ops.model.lifecycle import Event
from durable_ops.model.routing import Route
from durable_ops.storage.db import on_galera
from durable_ops.storage.events import Changed, publish
from durable_ops.storage.operations import history, slots
from durable_ops.storage.operations.rows import (
    OPS,
    ROWS_MAX,
    Query,
    attempt_id,
    deadline_open,
    detached,
    hash_token,
    in_line,
    numbered,
    of_type,
    one_statement,
    recognise,
)
from durable_ops.storage.per_row import per_row, row_ids
from durable_ops.storage.schema import UserOperation
from durable_ops.storage.task_pauses import not_paused
from durable_ops.storage.tx import ScopeViolation, Tx

CLAIM_BATCH_MAX = ROWS_MAX
CLAIM_SPREAD = 8
NO_LIMITS: Mapping[str, Concurrency] = {}

# Priorities strict; within one, each owner's turn (ADR 0049), then the one due longest.
_QUEUE_ORDER = (OPS.c.priority.desc(), OPS.c.fair_tag, OPS.c.not_before)
# Galera: leaving out the rows this batch took.
_NOT_TAKEN = OPS.c.id.not_in(bindparam("taken", expanding=True))


def claimable(state: BindParameter[Any], *, limited: bool) -> tuple[ColumnElement[bool], ...]:
    """Claimable at ``:now`` from ``state``; when ``limited`` (a type with concurrency
    limits, ADR 0048), also not of a slot that was full at its last count."""
    where = (
        OPS.c.state == state,
        in_line(),  # a row held for later is not even walked over (ADR 0050)
        deadline_open(),
        OPS.c.not_before <= bindparam("now"),  # a scheduled operation is due (ADR 0046)
    )
    return (*where, slots.has_room()) if limited else where


@dataclass(frozen=True)
class _Statements:
    candidates: Query
    head: Query  # Galera: the head of the queue without locks …
    pick: Query  # … then one of its top-priority rows, locked,
    next_free: Query  # … or the next free one when all are held.


def _per_type(types: int, part: Callable[[ColumnElement[bool]], Select[Any]]) -> Query:
    """``part`` for each of ``types`` task types, as one statement in the queue's order.

    Each part walks only its own type's rows of the claim index, and none of a
    paused type's (ADR 0051); an ``IN`` list of types would walk every type's
    rows, or sort them all."""
    union = one_statement([part(of_type(n)) for n in range(types)])
    if isinstance(union, Select):
        return union
    ordered = union.selected_columns
    return union.order_by(ordered.priority.desc(), ordered.fair_tag, ordered.not_before).limit(
        bindparam("limit")
    )


@cache
def _statements(types: int, limited: bool) -> _Statements:
    """The claim's SELECTs for ``types`` task types (``limited``: see ``claimable``)."""
    where = claimable(bindparam("from_state"), limited=limited)

    def candidates(typed: ColumnElement[bool], *more: ColumnElement[bool]) -> Select[Any]:
        return (
            select(OPS)
            .where(*where, typed, *more)
            .order_by(*_QUEUE_ORDER)
            .limit(bindparam("limit"))
            .with_for_update(skip_locked=True)
        )

    def head(typed: ColumnElement[bool]) -> Select[Any]:
        return (
            select(OPS.c.id, OPS.c.priority, OPS.c.fair_tag, OPS.c.not_before)
            .where(*where, typed, _NOT_TAKEN)
            .order_by(*_QUEUE_ORDER)
            .limit(CLAIM_SPREAD)
        )

    return _Statements(
        candidates=_per_type(types, candidates),
        head=_per_type(types, head),
        pick=(
            select(OPS)
            .where(OPS.c.id == bindparam("pick"), *where, not_paused())
            .with_for_update(skip_locked=True)
        ),
        next_free=_per_type(types, lambda typed: candidates(typed, _NOT_TAKEN)),
    )


@dataclass(frozen=True)
class Claim:
    operation: UserOperation
    lease_token: str


def spreads(tx: Tx) -> bool:
    """Whether claims spread over the head of the queue: on Galera (tests may force it)."""
    return on_galera(tx.connection)


@cache
def _take(count: int, starts_attempt: bool, holds_slots: bool) -> Update:
    """One UPDATE of ``count`` locked rows, each given its own token hash (and, under
    concurrency limits, the key slot it holds)."""
    ids = row_ids("id", count)
    held = {"slot_key": per_row(OPS.c.id, ids, "slot")} if holds_slots else {}
    return (
        update(OPS)
        .where(OPS.c.id.in_(ids), OPS.c.state == bindparam("from_state"))
        .values(
            state=bindparam("to_state"),
            attempt=OPS.c.attempt + 1 if starts_attempt else OPS.c.attempt,
            lease_token_hash=per_row(OPS.c.id, ids, "hash"),
            lease_expires_at=bindparam("expires"),
            started_at=func.coalesce(OPS.c.started_at, bindparam("now")),
            updated_at=bindparam("now"),
            next_attempt_at=None,
            # The progress an earlier run left is shown while the operation waits ("will
            # resume"); a new run starts from nothing, or the page would show it as its own
            # until its first beat (which may well report less).
            progress_percent=0,
            **held,
        )
    )


def claim(
    tx: Tx,
    task_types: Sequence[str],
    lease_seconds: int,
    now: datetime,
    *,
    limit: int = 1,
    external_route: bool = False,
    limits: Mapping[str, Concurrency] = NO_LIMITS,
) -> list[Claim]:
    """Up to ``limit`` claims of these task types, each with its own lease token, never
    past the concurrency ``limits`` of their types (the registry's, ADR 0048)."""
    if tx.owner_id is not None:
        raise ScopeViolation("the claim runs in the neutral scope")
    bounds.int_range("max_operations", limit, (1, CLAIM_BATCH_MAX))
    names = bounds.claim_task_types(task_types)
    if not names:
        return []
    expires = lifecycle.lease_expiry(now, lease_seconds)
    move = lifecycle.CLAIMS[Event.CLAIM_EXTERNAL if external_route else Event.CLAIM]
    where = numbered([{"of_type": name} for name in names], from_state=move.source, now=now)
    limited = {name: limits[name] for name in names if name in limits}
    statements = _statements(len(names), bool(limited))
    if spreads(tx):
        rows: list[Row[Any]] = []  # each picked at random among the top priority of the head
        while len(rows) < limit and (picked := _pick(tx, statements, where, rows)) is not None:
            rows.append(picked)
    else:
        rows = list(tx.execute(statements.candidates, {**where, "limit": limit}))
    held: dict[str, str] = {}
    if limited and rows:
        rows, held = slots.take(tx, rows, limited)
    if not rows:
        return []
    tokens = [secrets.token_urlsafe(32) for _ in rows]  # 256 random bits each
    hashes = [hash_token(token) for token in tokens]
    each = [
        {"id": row.id, "hash": token_hash, **({"slot": held.get(row.id)} if limited else {})}
        for row, token_hash in zip(rows, hashes, strict=True)
    ]
    shared = {"from_state": move.source, "to_state": move.target, "expires": expires, "now": now}
    taken = tx.write(_take(len(rows), move.starts_attempt, bool(limited)), numbered(each, **shared))
    if taken != len(rows):  # unreachable while the rows are locked
        raise RuntimeError(f"claimed {taken} of the {len(rows)} rows locked")
    recognise(rows[0].id, lease_token_hash=hashes[0])
    route = Route.EXTERNAL if external_route else Route.LOCAL
    claims: list[Claim] = []
    starts: list[dict[str, Any]] = []
    for row, token, token_hash in zip(rows, tokens, hashes, strict=True):
        found = row._mapping
        values = {
            "state": move.target,
            "attempt": move.attempt_after(found["attempt"]),
            "lease_token_hash": token_hash,
            "lease_expires_at": expires,
            "started_at": found["started_at"] or now,
            "updated_at": now,
            "next_attempt_at": None,
            "progress_percent": 0,
            **({"slot_key": held.get(row.id)} if limited else {}),
        }
        claims.append(Claim(detached({**found, **values}), token))
        owner = found["owner_user_id"]
        publish(Changed(row.id, move.target, found["task_type"], owner_id=owner))
        starts.append(
            {
                "id": attempt_id(token_hash),
                "operation_id": row.id,
                "owner_user_id": owner,
                "attempt": values["attempt"],
                "route": route,
                "started_at": now,
                "lease_expires_at": expires,
            }
        )
    history.start(tx, starts)
    return claims


def _pick(
    tx: Tx, statements: _Statements, where: dict[str, Any], taken: list[Row[Any]]
) -> Row[Any] | None:
    """One of the head's top-priority rows not locked elsewhere nor ``taken``, at random;
    when all are held, the next free row of the queue."""
    choice = {**where, "taken": [row.id for row in taken]}
    head = tx.execute(statements.head, {**choice, "limit": CLAIM_SPREAD}).all()
    if not head:
        return None
    ids = [row.id for row in head if row.priority == head[0].priority]
    random.shuffle(ids)
    for pick in ids:
        row = tx.execute(statements.pick, {**where, "pick": pick}).first()
        if row is not None:
            return row
    return tx.execute(statements.next_free, {**choice, "limit": 1}).first()
