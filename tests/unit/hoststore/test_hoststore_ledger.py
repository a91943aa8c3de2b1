"""begin/advance rules as pure functions: reuse, conflicts, blocking, CAS, capacity."""

from __future__ import annotations

import dataclasses

import pytest

from durable_ops.hoststore import ledger
from durable_ops.hoststore.errors import (
    ForbiddenTransition,
    PlanHashConflict,
    RevisionMismatch,
    StoreFull,
    UnknownOperation,
    UnresolvedOperation,
)
from durable_ops.hoststore.snapshot import (
    RECORD_GROWTH_RESERVE,
    Record,
    Snapshot,
    decode,
    encode,
)
from durable_ops.hoststore.transitions import State

T0 = "2026-01-02T03:04:05.000000Z"
T1 = "2026-01-02T03:04:06.000000Z"
EMPTY = Snapshot("runner-1", {})


def _begun(operation_id: str = "op-1", plan: str = "hash-a") -> Snapshot:
    return ledger.begin(EMPTY, operation_id, plan, now=T0).snapshot


def test_begin_creates_a_queued_record_at_revision_one() -> None:
    change = ledger.begin(EMPTY, "op-1", "hash-a", now=T0)
    assert change.created
    assert isinstance(change.record, Record)
    assert change.record.state is State.QUEUED
    assert change.record.revision == 1
    assert change.record.created_at == change.record.updated_at == T0
    assert change.payload is not None
    assert bytes(change.payload) == encode(change.snapshot)
    assert len(change.payload) == len(encode(change.snapshot))
    assert decode(bytes(change.payload)).records == {"op-1": change.record}
    assert EMPTY.records == {}, "the current snapshot is never mutated"


def test_same_id_and_hash_returns_the_original_without_a_write() -> None:
    current = _begun()
    change = ledger.begin(current, "op-1", "hash-a", now=T1)
    assert not change.created
    assert change.payload is None
    assert change.record == current.records["op-1"]
    assert change.record.created_at == T0


def test_same_id_and_hash_returns_the_original_even_when_terminal() -> None:
    current = ledger.advance(_begun(), "op-1", 1, State.CANCELLED, now=T1).snapshot
    change = ledger.begin(current, "op-1", "hash-a", now=T1)
    assert (change.created, change.record.state) == (False, State.CANCELLED)


def test_same_id_with_another_hash_conflicts() -> None:
    with pytest.raises(PlanHashConflict):
        ledger.begin(_begun(), "op-1", "hash-b", now=T1)


@pytest.mark.parametrize(
    "path",
    [
        [],
        [State.RUNNING],
        [State.RUNNING, State.NEEDS_ATTENTION],
        [State.RUNNING, State.UNKNOWN],
    ],
)
def test_another_id_is_blocked_while_a_record_is_unresolved(path: list[State]) -> None:
    current = _begun()
    for revision, target in enumerate(path, start=1):
        current = ledger.advance(current, "op-1", revision, target, now=T1).snapshot
    with pytest.raises(UnresolvedOperation):
        ledger.begin(current, "op-2", "hash-b", now=T1)


@pytest.mark.parametrize(
    "path",
    [
        [State.CANCELLED],
        [State.RUNNING, State.SUCCEEDED],
        [State.RUNNING, State.FAILED_RECOVERED],
        [State.RUNNING, State.UNKNOWN, State.SUCCEEDED],
        [State.RUNNING, State.NEEDS_ATTENTION, State.FAILED_RECOVERED],
    ],
)
def test_another_id_may_begin_once_the_record_is_terminal(path: list[State]) -> None:
    current = _begun()
    for revision, target in enumerate(path, start=1):
        current = ledger.advance(current, "op-1", revision, target, now=T1).snapshot
    assert ledger.begin(current, "op-2", "hash-b", now=T1).created


def test_advance_compares_the_revision() -> None:
    current = _begun()
    with pytest.raises(RevisionMismatch):
        ledger.advance(current, "op-1", 2, State.RUNNING, now=T1)
    change = ledger.advance(current, "op-1", 1, State.RUNNING, now=T1)
    assert (change.record.state, change.record.revision, change.record.updated_at) == (
        State.RUNNING,
        2,
        T1,
    )
    assert change.record.created_at == T0


def test_a_second_claim_fails_with_either_revision() -> None:
    claimed = ledger.advance(_begun(), "op-1", 1, State.RUNNING, now=T1).snapshot
    with pytest.raises(RevisionMismatch):
        ledger.advance(claimed, "op-1", 1, State.RUNNING, now=T1)
    with pytest.raises(ForbiddenTransition):
        ledger.advance(claimed, "op-1", 2, State.RUNNING, now=T1)


def test_advance_of_an_unknown_id_is_refused() -> None:
    with pytest.raises(UnknownOperation):
        ledger.advance(EMPTY, "op-9", 1, State.RUNNING, now=T1)


def test_records_are_values() -> None:
    record = ledger.begin(EMPTY, "op-1", "hash-a", now=T0).record
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.state = State.RUNNING  # type: ignore[misc]


def _needed_for_begin() -> int:
    payload = ledger.begin(EMPTY, "op-1", "hash-a", now=T0).payload
    assert payload is not None
    return payload.size


def test_begin_keeps_exactly_the_growth_reserve() -> None:
    needed = _needed_for_begin()
    fits = needed + RECORD_GROWTH_RESERVE
    assert ledger.begin(EMPTY, "op-1", "hash-a", now=T0, capacity=fits).created
    with pytest.raises(StoreFull):
        ledger.begin(EMPTY, "op-1", "hash-a", now=T0, capacity=fits - 1)


def test_the_reserve_covers_the_longest_life_of_a_record() -> None:
    capacity = _needed_for_begin() + RECORD_GROWTH_RESERVE
    current = ledger.begin(EMPTY, "op-1", "hash-a", now=T0, capacity=capacity).snapshot
    path = [State.RUNNING, State.NEEDS_ATTENTION, State.FAILED_RECOVERED]
    for revision, target in enumerate(path, start=1):
        current = ledger.advance(
            current, "op-1", revision, target, now=T1, capacity=capacity
        ).snapshot
    assert current.records["op-1"].state is State.FAILED_RECOVERED


def test_advance_beyond_the_cap_fails_closed() -> None:
    current = _begun()
    with pytest.raises(StoreFull):
        ledger.advance(current, "op-1", 1, State.RUNNING, now=T1, capacity=10)
