"""Concurrency slots on the database (issue 37 point 3, ADR 0048): the claim's counters.

A claim that names a task type with limits (``model.concurrency_limits``) does, after
locking its candidates, three statements more than one without:

1. one multi-row ``INSERT IGNORE`` of the slot rows it needs that do not exist yet
   (a type's first claim, a key's first run): ``running`` 0;
2. one ``SELECT … FOR UPDATE`` of those rows by primary key: their counts, locked,
   so two claims of one slot queue on the row (one server) or fail certification
   and are retried (Galera): never both counted against the same room;
3. one UPDATE writing each slot's new count and limit (``CASE id``).

Candidates without room stay queued. The claim's SELECT already leaves out the
operations whose slot was full at its last count (``has_room``), so a full key's
backlog does not hold the head of the queue.

The transition that ends a run (``apply.write``) gives its slots back with one
relative UPDATE (``release``); an operation of a type without limits holds none
(``slot_key`` NULL), so its transitions pay nothing.

A slot at 0 is deleted by the periodic prune (``prune_idle``): a key is usually a
subject id, so without it the table would keep a row for every subject that ever ran.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from typing import Any, cast

from sqlalchemy import (
    ColumnElement,
    Row,
    Table,
    Update,
    bindparam,
    delete,
    exists,
    func,
    insert,
    select,
    update,
)

from durable_ops.model import concurrency_limits
from durable_ops.model.concurrency_limits import Candidate, Concurrency, capacity
from durable_ops.storage.operations.rows import OPS, numbered
from durable_ops.storage.per_row import per_row, row_ids
from durable_ops.storage.schema import ConcurrencySlot
from durable_ops.storage.tx import Tx

SLOTS = cast(Table, ConcurrencySlot.__table__)


def _full(slot_id: ColumnElement[str]) -> ColumnElement[bool]:
    return exists().where(
        SLOTS.c.id == slot_id,
        SLOTS.c.capacity.is_not(None),
        SLOTS.c.running >= SLOTS.c.capacity,
    )


def has_room() -> ColumnElement[bool]:
    """Neither the operation's type slot nor its owner's key slot was full at its last
    count: two primary-key probes per row the claim looks at (limited claims only)."""
    key = func.coalesce(OPS.c.concurrency_key, OPS.c.subject_id)
    type_slot = OPS.c.task_type + "|"
    key_slot = OPS.c.task_type + "|" + OPS.c.owner_user_id + "/" + key
    return ~_full(type_slot) & ~_full(key_slot)


def take(
    tx: Tx, rows: Sequence[Row[Any]], limits: Mapping[str, Concurrency]
) -> tuple[list[Row[Any]], dict[str, str]]:
    """The rows (locked candidates, in queue order) that may start under ``limits``, and
    the key slot each limited one will hold (by operation id; "" for a type limited only
    in total). Writes the slots' new counts."""
    limited = [row._mapping for row in rows if row.task_type in limits]
    if not limited:
        return list(rows), {}
    candidates = [Candidate(found["task_type"], _key_slot(found, limits)) for found in limited]
    needed = sorted(
        {concurrency_limits.type_slot(c.task_type) for c in candidates}
        | {c.key_slot for c in candidates if c.key_slot is not None}
    )
    tx.insert_if_absent(
        insert(SLOTS).values([{"id": slot, "running": 0, "capacity": None} for slot in needed]),
        {},
    )
    running = {row.id: row.running for row in tx.execute(_LOCKED, {"ids": needed})}
    chosen, counts = concurrency_limits.admitted(candidates, running, limits)
    each = [
        {"slot": slot, "running": counts.get(slot, 0), "capacity": capacity(slot, limits)}
        for slot in needed
    ]
    tx.write(_counts(len(each)), numbered(each))
    held = {
        found["id"]: candidate.key_slot or ""
        for found, candidate, go in zip(limited, candidates, chosen, strict=True)
        if go
    }
    return [row for row in rows if row.task_type not in limits or row.id in held], held


def _key_slot(found: Mapping[Any, Any], limits: Mapping[str, Concurrency]) -> str | None:
    """The key slot the operation would hold (None: its type has no per-key limit)."""
    task_type, owner = found["task_type"], found["owner_user_id"]
    key = str(found["concurrency_key"] or found["subject_id"])
    return concurrency_limits.slots_of(task_type, owner, key, limits[task_type])[1]


_LOCKED = (
    select(SLOTS.c.id, SLOTS.c.running)
    .where(SLOTS.c.id.in_(bindparam("ids", expanding=True)))
    .order_by(SLOTS.c.id)  # one lock order for every claim
    .with_for_update()
)


@cache
def _counts(count: int) -> Update:
    """Each of ``count`` slots given its new count and limit (``CASE id``)."""
    ids = row_ids("slot", count)
    own = {name: per_row(SLOTS.c.id, ids, name) for name in ("running", "capacity")}
    return update(SLOTS).where(SLOTS.c.id.in_(ids)).values(own)


@cache
def _given_back(count: int) -> Update:
    """Each of ``count`` slots given back its own number of runs (``CASE id``)."""
    ids = row_ids("slot", count)
    back = per_row(SLOTS.c.id, ids, "back")
    return update(SLOTS).where(SLOTS.c.id.in_(ids)).values(running=SLOTS.c.running - back)


def release(tx: Tx, held: Iterable[tuple[str, str]]) -> None:
    """Give back the slots of runs that ended: (task type, key slot or "") each, in one
    UPDATE of relative counts (a claim may hold a row's lock: this waits, then subtracts)."""
    given_back = Counter(
        slot
        for task_type, key_slot in held
        for slot in (concurrency_limits.type_slot(task_type), key_slot)
        if slot
    )
    if given_back:
        each = [{"slot": slot, "back": given_back[slot]} for slot in sorted(given_back)]
        tx.write(_given_back(len(each)), numbered(each))


_IDLE = select(SLOTS.c.id).where(SLOTS.c.running == 0).limit(bindparam("limit"))
_DELETE_IDLE = delete(SLOTS).where(
    SLOTS.c.id.in_(bindparam("ids", expanding=True)), SLOTS.c.running == 0
)


def prune_idle(tx: Tx, limit: int) -> int:
    """Up to ``limit`` slot rows no run holds, deleted; the next claim that needs one
    inserts it again at 0 (a missing row counts as a slot with room).

    Safe beside claims: a claim's ``INSERT IGNORE`` of an existing row locks it until the
    claim commits, so the DELETE, which checks ``running = 0`` again on the row it locks,
    finds the count that claim wrote; on Galera the two writes of one row certify in
    turn, and the claim that lost is retried from its start."""
    ids = [row.id for row in tx.execute(_IDLE, {"limit": limit})]
    return tx.write(_DELETE_IDLE, {"ids": ids}) if ids else 0
