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
from typing import Any, cast

from sqlalchemy import (
    ColumnElement,
    Row,
    Table,
    bindparam,
    case,
    delete,
    exists,
    func,
    insert,
    select,
    update,
)

from durable_ops.model import concurrency_limits
from durable_ops.model.concurrency_limits import Candidate, Concurrency
from durable_ops.storage.schema import ConcurrencySlot, UserOperation
from durable_ops.storage.tx import Tx

SLOTS = cast(Table, ConcurrencySlot.__table__)
OPS = cast(Table, UserOperation.__table__)


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


def _key(row: Mapping[Any, Any]) -> str:
    return str(row["concurrency_key"] or row["subject_id"])


def take(
    tx: Tx, rows: Sequence[Row[Any]], limits: Mapping[str, Concurrency]
) -> tuple[list[Row[Any]], dict[str, str]]:
    """The rows (locked candidates, in queue order) that may start under ``limits``, and
    the key slot each limited one will hold (by operation id; "" for a type limited only
    in total). Writes the slots' new counts."""
    limited = [row for row in rows if row._mapping["task_type"] in limits]
    if not limited:
        return list(rows), {}
    candidates: list[Candidate] = []
    for row in limited:
        found = row._mapping
        _, key_slot = concurrency_limits.slots_of(
            found["task_type"], found["owner_user_id"], _key(found), limits[found["task_type"]]
        )
        candidates.append(Candidate(found["task_type"], key_slot))
    needed = sorted(
        {concurrency_limits.type_slot(c.task_type) for c in candidates}
        | {c.key_slot for c in candidates if c.key_slot is not None}
    )
    tx.insert_if_absent(
        insert(SLOTS).values([{"id": slot, "running": 0, "capacity": None} for slot in needed]),
        {},
    )
    locked = tx.execute(
        select(SLOTS.c.id, SLOTS.c.running)
        .where(SLOTS.c.id.in_(bindparam("ids", expanding=True)))
        .order_by(SLOTS.c.id)  # one lock order for every claim
        .with_for_update(),
        {"ids": needed},
    )
    running = {row.id: row.running for row in locked}
    chosen, counts = concurrency_limits.admitted(candidates, running, limits)
    _write(tx, {slot: counts.get(slot, 0) for slot in needed}, limits)
    started = dict(zip((row._mapping["id"] for row in limited), chosen, strict=True))
    kept = [row for row in rows if started.get(row._mapping["id"], True)]
    held = {
        row._mapping["id"]: candidate.key_slot or ""
        for row, candidate, go in zip(limited, candidates, chosen, strict=True)
        if go
    }
    return kept, held


def _write(tx: Tx, counts: Mapping[str, int], limits: Mapping[str, Concurrency]) -> None:
    slots = list(counts)
    parameters: dict[str, Any] = {"ids": slots}
    running_whens: list[tuple[ColumnElement[bool], Any]] = []
    capacity_whens: list[tuple[ColumnElement[bool], Any]] = []
    for n, slot in enumerate(slots):
        parameters[f"slot_{n}"] = slot
        parameters[f"running_{n}"] = counts[slot]
        parameters[f"capacity_{n}"] = concurrency_limits.capacity(slot, limits)
        running_whens.append((SLOTS.c.id == bindparam(f"slot_{n}"), bindparam(f"running_{n}")))
        capacity_whens.append((SLOTS.c.id == bindparam(f"slot_{n}"), bindparam(f"capacity_{n}")))
    tx.write(
        update(SLOTS)
        .where(SLOTS.c.id.in_(bindparam("ids", expanding=True)))
        .values(running=case(*running_whens), capacity=case(*capacity_whens)),
        parameters,
    )


def release(tx: Tx, held: Iterable[tuple[str, str]]) -> None:
    """Give back the slots of runs that ended: (task type, key slot or "") each, in one
    UPDATE of relative counts (a claim may hold a row's lock: this waits, then subtracts)."""
    given_back: Counter[str] = Counter()
    for task_type, key_slot in held:
        given_back[concurrency_limits.type_slot(task_type)] += 1
        if key_slot:
            given_back[key_slot] += 1
    if not given_back:
        return
    slots = sorted(given_back)
    parameters: dict[str, Any] = {"ids": slots}
    whens: list[tuple[ColumnElement[bool], Any]] = []
    for n, slot in enumerate(slots):
        parameters[f"slot_{n}"] = slot
        parameters[f"back_{n}"] = given_back[slot]
        whens.append((SLOTS.c.id == bindparam(f"slot_{n}"), bindparam(f"back_{n}")))
    tx.write(
        update(SLOTS)
        .where(SLOTS.c.id.in_(bindparam("ids", expanding=True)))
        .values(running=SLOTS.c.running - case(*whens, else_=0)),
        parameters,
    )


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
