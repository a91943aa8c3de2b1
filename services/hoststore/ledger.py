"""The rules of ``begin`` and ``advance`` as pure functions over a snapshot.

Each function either refuses (raising the error that says why) or returns a
``Change``: the record to hand back, the next snapshot and the encoded document
to persist. The session writes that document and only then adopts the new
snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass

from durable_ops.hoststore import snapshot as fmt
from durable_ops.hoststore.errors import (
    PlanHashConflict,
    RevisionMismatch,
    StoreFull,
    UnknownOperation,
    UnresolvedOperation,
)
from durable_ops.hoststore.snapshot import Record, Snapshot
from durable_ops.hoststore.transitions import INITIAL, State, check_transition


@dataclass(frozen=True, slots=True)
class Change:
    record: Record
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
) -> Change:
    existing = current.records.get(operation_id)
    if existing is not None:
        if existing.plan_hash != plan_hash:
            raise PlanHashConflict(
                f"operation {operation_id!r} was begun with another plan hash"
                f" ({existing.plan_hash[:12]}...)"
            )
        return Change(record=existing, snapshot=current, payload=None)
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
) -> Change:
    existing = current.records.get(operation_id)
    if existing is None:
        raise UnknownOperation(f"no operation {operation_id!r}")
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


def _encode(
    following: Snapshot,
    current: Snapshot,
    operation_id: str,
    encoder: fmt.IncrementalEncoder | None,
) -> fmt.Encoded:
    """``fmt.encode(following)``, incrementally when the caller keeps an encoder."""
    if encoder is None:
        return fmt.Encoded.of(fmt.encode(following))
    return encoder.encode_parts(following, previous=current, changed=operation_id)
