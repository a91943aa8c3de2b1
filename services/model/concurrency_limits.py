"""Per-key and global concurrency limits of a task type (issue 37 point 3, ADR 0048). Pure.

A task type may declare, in the registry, how many of its operations may run at
once per concurrency key and in all. A key is the create's ``concurrency_key``,
else its subject id, and belongs to the operation's owner: one owner's keys never
count against another's, so no owner can hold another's work back by naming its key.

The claim keeps a counter row per (task type, owner's key) and one per task type
(the "slot" rows); ``admitted`` decides, from the counts it read locked, which of
the candidates it locked may start, in queue order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from durable_ops.model import bounds

# A limit is at least one running operation (zero would be a pause: ``opsctl tasks pause``).
LIMIT_RANGE = (1, 100_000)
CONCURRENCY_KEY_MAX = bounds.SUBJECT_ID_MAX
# ``{task type}|{owner}/{key}``: a slot row's id, within a primary key's width.
SLOT_ID_MAX = bounds.TASK_TYPE_MAX + 1 + bounds.OWNER_ID_MAX + 1 + CONCURRENCY_KEY_MAX


@dataclass(frozen=True)
class Concurrency:
    """At most ``per_key`` operations of the type run at once per owner's key, and at most
    ``total`` in all; None: no such limit."""

    per_key: int | None = None
    total: int | None = None

    def __post_init__(self) -> None:
        for name in ("per_key", "total"):
            value = getattr(self, name)
            if value is not None:
                bounds.int_range(name, value, LIMIT_RANGE)

    @property
    def limited(self) -> bool:
        return self.per_key is not None or self.total is not None


UNLIMITED = Concurrency()


def type_slot(task_type: str) -> str:
    """The id of the type's own counter row (every running operation of a limited type)."""
    return f"{task_type}|"


def key_slot(task_type: str, owner_id: str, key: str) -> str:
    """The id of the counter row of one owner's key."""
    return f"{task_type}|{owner_id}/{key}"


@dataclass(frozen=True)
class Candidate:
    """An operation the claim locked, with the slots it would hold."""

    task_type: str
    key_slot: str | None  # None: its type has no per-key limit


def slots_of(task_type: str, owner_id: str, key: str, limit: Concurrency) -> tuple[str, str | None]:
    """(the type's slot, the key's slot or None) an operation of ``task_type`` holds."""
    per_key = key_slot(task_type, owner_id, key) if limit.per_key is not None else None
    return type_slot(task_type), per_key


def capacity(slot: str, limits: Mapping[str, Concurrency]) -> int | None:
    """How many may hold ``slot`` at once: its type's ``total`` or ``per_key``."""
    task_type, _, rest = slot.partition("|")
    limit = limits[task_type]
    return limit.total if rest == "" else limit.per_key


def admitted(
    candidates: Sequence[Candidate],
    running: Mapping[str, int],
    limits: Mapping[str, Concurrency],
) -> tuple[list[bool], dict[str, int]]:
    """Which candidates may start, in order, and each touched slot's count after.

    ``running`` holds each slot's count as read under lock (absent: 0). A candidate
    starts when its type and its key both have room, counting the candidates started
    before it in this claim.
    """
    counts = dict(running)
    chosen: list[bool] = []
    for candidate in candidates:
        slots = [type_slot(candidate.task_type)]
        if candidate.key_slot is not None:
            slots.append(candidate.key_slot)
        room = all(
            (cap := capacity(slot, limits)) is None or counts.get(slot, 0) < cap for slot in slots
        )
        chosen.append(room)
        if room:
            for slot in slots:
                counts[slot] = counts.get(slot, 0) + 1
    return chosen, counts
