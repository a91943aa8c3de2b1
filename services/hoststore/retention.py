"""Retention rules of the host store (ADR 0018): compaction into tombstones. Pure, no I/O.

Two horizons, each applied only by an explicit call of the lock holder:

- **Compaction** (``older_than``): a terminal record whose last change is at
  least that old becomes a tombstone, ``(id, plan hash, final state, revision,
  time of the final state)``. Nothing is forgotten: ``begin`` of its id still
  replays the outcome (same plan hash, ``created=False``) or refuses
  (``PlanHashConflict``), and ``advance`` is refused as for any terminal record.
- **Forgetting** (a second, longer horizon, optional): a tombstone at least that
  old is dropped. Its id is then unknown, and a ``begin`` of it creates a new
  record. Forgetting is how the snapshot stays bounded when ids never stop
  arriving; the caller must refuse requests older than that horizon upstream.

Live records are never dropped, and a non-terminal record is never compacted.
Ages compare fixed-width UTC timestamps, so "at least that old" is
``updated_at <= cutoff(now, horizon)``.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from durable_ops.hoststore import snapshot as fmt
from durable_ops.hoststore.errors import InvalidInput, PlanHashConflict
from durable_ops.hoststore.snapshot import Record, Snapshot, Tombstone


def cutoff(now: datetime, horizon: timedelta) -> str:
    """The timestamp at or before which something is at least ``horizon`` old at ``now``."""
    if not isinstance(horizon, timedelta) or horizon < timedelta(0):
        raise InvalidInput(f"a horizon must be a non-negative timedelta, got {horizon!r}")
    if not isinstance(now, datetime):
        raise InvalidInput(f"now must be a datetime, got {now!r}")
    try:
        moment = now - horizon
    except OverflowError:
        raise InvalidInput(f"the horizon {horizon} reaches before year 1") from None
    return fmt.format_timestamp(moment)


def tombstone_of(record: Record) -> Tombstone:
    """What compaction keeps of a terminal record."""
    if not record.state.is_terminal:
        raise InvalidInput(f"operation {record.id!r} is {record.state}, not terminal")
    return Tombstone(
        id=record.id,
        plan_hash=record.plan_hash,
        state=record.state,
        revision=record.revision,
        updated_at=record.updated_at,
    )


def compactable(snapshot: Snapshot, before: str) -> list[Record]:
    """The terminal records last changed at or before ``before``, by id."""
    return sorted(
        (r for r in snapshot.records.values() if r.state.is_terminal and r.updated_at <= before),
        key=lambda record: record.id,
    )


def forgettable(snapshot: Snapshot, before: str) -> list[Tombstone]:
    """The tombstones whose final state was reached at or before ``before``, by id."""
    return sorted(
        (t for t in snapshot.tombstones.values() if t.updated_at <= before),
        key=lambda tombstone: tombstone.id,
    )


def compact(snapshot: Snapshot, before: str) -> tuple[Snapshot, int]:
    """``snapshot`` with ``compactable(snapshot, before)`` turned into tombstones, and how many."""
    moving = compactable(snapshot, before)
    if not moving:
        return snapshot, 0
    gone = {record.id for record in moving}
    records = {key: record for key, record in snapshot.records.items() if key not in gone}
    tombstones = {**snapshot.tombstones, **{r.id: tombstone_of(r) for r in moving}}
    return Snapshot(snapshot.host_id, records, tombstones), len(moving)


def forget(snapshot: Snapshot, before: str) -> tuple[Snapshot, int]:
    """``snapshot`` without ``forgettable(snapshot, before)``, and how many were dropped."""
    dropping = {tombstone.id for tombstone in forgettable(snapshot, before)}
    if not dropping:
        return snapshot, 0
    tombstones = {k: t for k, t in snapshot.tombstones.items() if k not in dropping}
    return Snapshot(snapshot.host_id, dict(snapshot.records), tombstones), len(dropping)


def replay(tombstone: Tombstone, plan_hash: str) -> Tombstone:
    """How ``begin(id, plan_hash)`` answers for a compacted id: the outcome, or a conflict."""
    if tombstone.plan_hash != plan_hash:
        raise PlanHashConflict(
            f"operation {tombstone.id!r} was begun with another plan hash"
            f" ({tombstone.plan_hash[:12]}...); it finished {tombstone.state}"
            " and was compacted"
        )
    return tombstone
