"""The rules of ``begin`` and ``advance`` as pure functions over a snapshot.

Each function either refuses (raising the error that says why) or returns a
``Change``: the record to hand back, the next snapshot and the bytes to persist.
The session writes those bytes and only then adopts the new snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from services.hoststore import snapshot as fmt
from services.hoststore.errors import (
    CapacityExceeded,
    PlanHashConflict,
    RevisionMismatch,
    UnknownOperation,
    UnresolvedOperation,
)
from services.hoststore.snapshot import Record, Snapshot
from services.hoststore.transitions import INITIAL, State, check_transition


@dataclass(frozen=True, slots=True)
class Change:
    record: Record
    snapshot: Snapshot
    payload: bytes | None
    """Canonical bytes to persist; ``None`` when nothing changed (an idempotent begin)."""

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
    following = Snapshot(current.host_id, {**current.records, operation_id: record})
    payload = _encode(following, current, operation_id, encoder)
    if len(payload) + fmt.RECORD_GROWTH_RESERVE > capacity:
        raise CapacityExceeded(
            f"beginning {operation_id!r} needs {len(payload)} bytes plus a"
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
    record = replace(existing, state=target, revision=revision + 1, updated_at=now)
    following = Snapshot(current.host_id, {**current.records, operation_id: record})
    payload = _encode(following, current, operation_id, encoder)
    if len(payload) > capacity:
        raise CapacityExceeded(
            f"advancing {operation_id!r} needs {len(payload)} bytes; the cap is {capacity}"
        )
    return Change(record=record, snapshot=following, payload=payload)


def _encode(
    following: Snapshot,
    current: Snapshot,
    operation_id: str,
    encoder: fmt.IncrementalEncoder | None,
) -> bytes:
    """``fmt.encode(following)``, incrementally when the caller keeps an encoder."""
    if encoder is None:
        return fmt.encode(following)
    return encoder.encode(following, previous=current, changed=operation_id)
