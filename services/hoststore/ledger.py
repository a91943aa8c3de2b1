"""The rules of ``begin``, ``advance`` and retention as pure functions over a snapshot.

Each function either refuses (raising the error that says why) or returns a
``Change`` (the record to hand back, the next snapshot and the encoded document
to persist) or, for ``compact`` and ``forget``, a ``Retained``. The session
writes that document and only then adopts the new snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from durable_ops.hoststore import retention
from durable_ops.hoststore import snapshot as fmt
from durable_ops.hoststore.errors import (
    ForbiddenTransition,
    PlanHashConflict,
    RevisionMismatch,
    StoreFull,
    UnknownOperation,
    UnresolvedOperation,
)
from durable_ops.hoststore.snapshot import Record, Snapshot, Tombstone
from durable_ops.hoststore.transitions import INITIAL, State, check_transition

Answer = TypeVar("Answer", Record, Record | Tombstone)


@dataclass(frozen=True, slots=True)
class Change(Generic[Answer]):
    record: Answer
    """The record; for ``begin``, the tombstone it replays for a compacted id."""
    snapshot: Snapshot
    payload: fmt.Encoded | None
    """The canonical document to persist; ``None`` when nothing changed (an idempotent begin)."""

    @property
    def created(self) -> bool:
        return self.payload is not None


def begin(
    current: Snapshot,
    operation_id: str,
    plan_hash: str,
    *,
    now: str,
    capacity: int = fmt.MAX_SNAPSHOT_BYTES,
    encoder: fmt.IncrementalEncoder | None = None,
) -> Change[Record | Tombstone]:
    existing = current.records.get(operation_id)
    if existing is not None:
        if existing.plan_hash != plan_hash:
            raise PlanHashConflict(
                f"operation {operation_id!r} was begun with another plan hash"
                f" ({existing.plan_hash[:12]}...)"
            )
        return Change(record=existing, snapshot=current, payload=None)
    buried = current.tombstones.get(operation_id)
    if buried is not None:
        return Change(record=retention.replay(buried, plan_hash), snapshot=current, payload=None)
    blocking = current.unresolved()
    if blocking is not None:
        raise UnresolvedOperation(
            f"operation {blocking.id!r} is still {blocking.state}; resolve it before"
            f" beginning {operation_id!r}"
        )
    record = Record(
        id=operation_id,
        plan_hash=plan_hash,
        state=INITIAL,
        revision=1,
        created_at=now,
        updated_at=now,
    )
    following = current.with_record(record)
    payload = _encode(following, current, operation_id, encoder)
    if payload.size + fmt.RECORD_GROWTH_RESERVE > capacity:
        raise StoreFull(
            f"beginning {operation_id!r} needs {payload.size} bytes plus a"
            f" {fmt.RECORD_GROWTH_RESERVE}-byte reserve; the snapshot cap is {capacity}"
        )
    return Change(record=record, snapshot=following, payload=payload)


def advance(
    current: Snapshot,
    operation_id: str,
    revision: int,
    target: State,
    *,
    now: str,
    capacity: int = fmt.MAX_SNAPSHOT_BYTES,
    encoder: fmt.IncrementalEncoder | None = None,
) -> Change[Record]:
    existing = current.records.get(operation_id)
    if existing is None:
        buried = current.tombstones.get(operation_id)
        if buried is None:
            raise UnknownOperation(f"no operation {operation_id!r}")
        # Refused as the terminal record it was: the revision first, then the table.
        if buried.revision != revision:
            raise RevisionMismatch(
                f"operation {operation_id!r} is at revision {buried.revision}, not {revision}"
            )
        raise ForbiddenTransition(
            f"operation {operation_id!r} finished {buried.state} and was compacted;"
            " it allows no transition"
        )
    if existing.revision != revision:
        raise RevisionMismatch(
            f"operation {operation_id!r} is at revision {existing.revision}, not {revision}"
        )
    check_transition(existing.state, target)
    record = Record(
        id=operation_id,
        plan_hash=existing.plan_hash,
        state=target,
        revision=revision + 1,
        created_at=existing.created_at,
        updated_at=now,
    )
    following = current.with_record(record)
    payload = _encode(following, current, operation_id, encoder)
    if payload.size > capacity:
        raise StoreFull(
            f"advancing {operation_id!r} needs {payload.size} bytes; the cap is {capacity}"
        )
    return Change(record=record, snapshot=following, payload=payload)


@dataclass(frozen=True, slots=True)
class Retained:
    """The outcome of ``compact`` or ``forget``: how many moved, and what to persist."""

    count: int
    snapshot: Snapshot
    payload: fmt.Encoded | None
    """The canonical document to persist; ``None`` when nothing was compactable."""


def compact(
    current: Snapshot,
    before: str,
    *,
    capacity: int = fmt.MAX_SNAPSHOT_BYTES,
    encoder: fmt.IncrementalEncoder | None = None,
) -> Retained:
    """Turn the terminal records last changed at or before ``before`` into tombstones."""
    following, count = retention.compact(current, before)
    return _retained(current, following, count, capacity, encoder)


def forget(
    current: Snapshot,
    before: str,
    *,
    capacity: int = fmt.MAX_SNAPSHOT_BYTES,
    encoder: fmt.IncrementalEncoder | None = None,
) -> Retained:
    """Drop the tombstones whose final state was reached at or before ``before``."""
    following, count = retention.forget(current, before)
    return _retained(current, following, count, capacity, encoder)


def _retained(
    current: Snapshot,
    following: Snapshot,
    count: int,
    capacity: int,
    encoder: fmt.IncrementalEncoder | None,
) -> Retained:
    if not count:
        return Retained(count=0, snapshot=current, payload=None)
    # Many records change at once: encoded from scratch (the encoder notices).
    payload = _encode(following, current, None, encoder)
    if payload.size > capacity:
        # Only a file of an older format, rewritten with its new field, can grow here.
        raise StoreFull(f"the compacted snapshot needs {payload.size} bytes; the cap is {capacity}")
    return Retained(count=count, snapshot=following, payload=payload)


def _encode(
    following: Snapshot,
    current: Snapshot,
    operation_id: str | None,
    encoder: fmt.IncrementalEncoder | None,
) -> fmt.Encoded:
    """``fmt.encode(following)``, incrementally when the caller keeps an encoder."""
    if encoder is None:
        return fmt.Encoded.of(fmt.encode(following))
    return encoder.encode_parts(following, previous=current, changed=operation_id)
