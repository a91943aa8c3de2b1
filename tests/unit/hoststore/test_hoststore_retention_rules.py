"""Retention rules as pure functions: what compacts, the tombstone, how begin answers for one."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from durable_ops.hoststore import ledger, retention
from durable_ops.hoststore.errors import (
    ForbiddenTransition,
    HostStoreError,
    InvalidInput,
    PlanHashConflict,
    RevisionMismatch,
    UnknownOperation,
)
from durable_ops.hoststore.snapshot import Record, Snapshot, Tombstone, decode, encode
from durable_ops.hoststore.transitions import TERMINAL, UNRESOLVED, State

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)


def _stamp(moment: datetime) -> str:
    return retention.cutoff(moment, timedelta(0))


OLD = _stamp(NOW - 10 * DAY)
RECENT = _stamp(NOW - DAY)


def _record(key: str, state: State, updated: str, revision: int = 3) -> Record:
    return Record(key, f"plan-{key}", state, revision, OLD, updated)


def _store() -> Snapshot:
    return Snapshot(
        "runner-1",
        {
            "old-done": _record("old-done", State.SUCCEEDED, OLD),
            "old-cancelled": _record("old-cancelled", State.CANCELLED, OLD, 2),
            "old-recovered": _record("old-recovered", State.FAILED_RECOVERED, OLD, 4),
            "recent-done": _record("recent-done", State.SUCCEEDED, RECENT),
            "old-unknown": _record("old-unknown", State.UNKNOWN, OLD),
        },
    )


def test_the_cutoff_is_now_minus_the_horizon_as_a_fixed_width_timestamp() -> None:
    assert retention.cutoff(NOW, DAY) == "2026-11-30T12:00:00.000000Z"
    assert retention.cutoff(NOW, timedelta(0)) == "2026-12-01T12:00:00.000000Z"


@pytest.mark.parametrize(
    ("now", "horizon"),
    [
        (NOW, timedelta(seconds=-1)),
        (NOW, 3600),
        (datetime(2026, 1, 1), DAY),  # naive
        ("2026-01-01", DAY),
        (datetime(1, 1, 1, tzinfo=UTC), DAY),  # before year 1
    ],
)
def test_bad_horizons_and_clocks_are_refused(now: object, horizon: object) -> None:
    with pytest.raises(InvalidInput):
        retention.cutoff(now, horizon)  # type: ignore[arg-type]


def test_only_terminal_records_at_least_the_horizon_old_are_compactable() -> None:
    before = retention.cutoff(NOW, 7 * DAY)
    assert [r.id for r in retention.compactable(_store(), before)] == [
        "old-cancelled",
        "old-done",
        "old-recovered",
    ]
    # The horizon is inclusive: a record exactly that old compacts.
    assert [r.id for r in retention.compactable(_store(), OLD)] == [
        "old-cancelled",
        "old-done",
        "old-recovered",
    ]
    assert retention.compactable(_store(), _stamp(NOW - 10 * DAY - timedelta(microseconds=1))) == []
    # A zero horizon compacts every terminal record, and never a live one.
    assert {r.id for r in retention.compactable(_store(), _stamp(NOW))} == {
        "old-cancelled",
        "old-done",
        "old-recovered",
        "recent-done",
    }


def test_a_tombstone_keeps_id_plan_hash_final_state_revision_and_its_time() -> None:
    record = _record("old-done", State.SUCCEEDED, OLD)
    assert retention.tombstone_of(record) == Tombstone(
        "old-done", "plan-old-done", State.SUCCEEDED, 3, OLD
    )
    with pytest.raises(InvalidInput):
        retention.tombstone_of(_record("x", State.RUNNING, OLD, 2))


def test_compaction_moves_records_into_tombstones_and_leaves_the_input_alone() -> None:
    current = _store()
    following, count = retention.compact(current, retention.cutoff(NOW, 7 * DAY))
    assert count == 3
    assert sorted(following.records) == ["old-unknown", "recent-done"]
    assert sorted(following.tombstones) == ["old-cancelled", "old-done", "old-recovered"]
    assert following.tombstones["old-recovered"].revision == 4
    assert len(current.records) == 5, "the current snapshot is never mutated"
    assert current.tombstones == {}
    assert decode(encode(following)) == following
    again, none = retention.compact(following, retention.cutoff(NOW, 7 * DAY))
    assert (again, none) == (following, 0)


def test_forgetting_drops_only_tombstones_at_least_the_second_horizon_old() -> None:
    compacted, _ = retention.compact(_store(), _stamp(NOW))
    following, count = retention.forget(compacted, retention.cutoff(NOW, 5 * DAY))
    assert count == 3
    assert sorted(following.tombstones) == ["recent-done"]
    assert sorted(following.records) == ["old-unknown"], "live records are never forgotten"
    assert retention.forget(following, retention.cutoff(NOW, 5 * DAY)) == (following, 0)
    # forgetting never touches a record that has not been compacted
    assert retention.forget(_store(), _stamp(NOW)) == (_store(), 0)


def _compacted() -> Snapshot:
    return retention.compact(_store(), _stamp(NOW))[0]


def test_begin_of_a_compacted_id_with_its_plan_hash_replays_the_outcome() -> None:
    current = _compacted()
    change = ledger.begin(current, "old-done", "plan-old-done", now=_stamp(NOW))
    assert not change.created
    assert change.payload is None
    assert change.snapshot is current
    assert change.record == current.tombstones["old-done"]
    assert (change.record.state, change.record.revision) == (State.SUCCEEDED, 3)


def test_begin_of_a_compacted_id_with_another_plan_hash_conflicts() -> None:
    with pytest.raises(PlanHashConflict, match="compacted"):
        ledger.begin(_compacted(), "old-done", "plan-other", now=_stamp(NOW))


def test_advance_of_a_compacted_id_is_refused_as_for_its_terminal_record() -> None:
    current = _compacted()
    with pytest.raises(RevisionMismatch):
        ledger.advance(current, "old-done", 2, State.SUCCEEDED, now=_stamp(NOW))
    for target in State:
        with pytest.raises(ForbiddenTransition):
            ledger.advance(current, "old-done", 3, target, now=_stamp(NOW))


def test_a_forgotten_id_is_unknown_and_begins_afresh() -> None:
    forgotten = retention.forget(_compacted(), _stamp(NOW))[0]
    with pytest.raises(UnknownOperation):
        ledger.advance(forgotten, "old-done", 3, State.SUCCEEDED, now=_stamp(NOW))
    # (old-unknown is still unresolved and blocks new ids; resolve it first)
    current = ledger.advance(forgotten, "old-unknown", 3, State.SUCCEEDED, now=_stamp(NOW)).snapshot
    change = ledger.begin(current, "old-done", "plan-other", now=_stamp(NOW))
    assert change.created
    assert change.record.state is State.QUEUED


def test_tombstones_do_not_block_new_ids() -> None:
    current = ledger.advance(_compacted(), "old-unknown", 3, State.SUCCEEDED, now=_stamp(NOW))
    assert ledger.begin(current.snapshot, "new", "plan-new", now=_stamp(NOW)).created


def test_ledger_compact_and_forget_encode_the_whole_snapshot() -> None:
    retained = ledger.compact(_store(), _stamp(NOW))
    assert retained.count == 4
    assert retained.payload is not None
    assert bytes(retained.payload) == encode(retained.snapshot)
    nothing = ledger.compact(retained.snapshot, _stamp(NOW))
    assert (nothing.count, nothing.payload) == (0, None)
    assert nothing.snapshot is retained.snapshot
    dropped = ledger.forget(retained.snapshot, _stamp(NOW))
    assert dropped.count == 4
    assert dropped.payload is not None
    assert bytes(dropped.payload) == encode(dropped.snapshot)


def test_a_tombstone_is_smaller_than_its_record() -> None:
    record = Record("op-000001", "f" * 64, State.SUCCEEDED, 3, OLD, RECENT)
    live = len(encode(Snapshot("h", {record.id: record})))
    buried = len(encode(Snapshot("h", {}, {record.id: retention.tombstone_of(record)})))
    assert buried < live
    empty = len(encode(Snapshot("h", {})))
    print(f"one record: {live - empty} bytes; its tombstone: {buried - empty} bytes")


STATES = st.sampled_from(sorted(State))
Attempt = Callable[[Snapshot], "ledger.Change[Record] | ledger.Change[Record | Tombstone]"]


def _answer(attempt: Attempt, current: Snapshot) -> tuple[str, object]:
    """What a begin or advance answers: the error class, or what it hands back."""
    try:
        change = attempt(current)
    except HostStoreError as exc:
        return type(exc).__name__, None
    record = change.record
    return "ok", (record.id, record.state, record.revision, change.created)


def _begin(key: str, plan: str, now: str) -> Attempt:
    return lambda current: ledger.begin(current, key, plan, now=now)


def _advance(key: str, revision: int, target: State, now: str) -> Attempt:
    return lambda current: ledger.advance(current, key, revision, target, now=now)


@settings(max_examples=200)
@given(
    entries=st.lists(st.tuples(STATES, st.integers(0, 20), st.booleans()), max_size=30),
    horizon=st.integers(0, 25),
    second=st.integers(0, 25),
)
def test_compaction_changes_no_answer_and_forgetting_only_unknows(
    entries: list[tuple[State, int, bool]], horizon: int, second: int
) -> None:
    """After compaction every begin and advance of a known id answers exactly as before."""
    records: dict[str, Record] = {}
    unresolved_seen = False
    for index, (drawn, age, _) in enumerate(entries):
        state = drawn
        if state in UNRESOLVED:
            state = State.SUCCEEDED if unresolved_seen else state
            unresolved_seen = True
        key = f"op-{index:02d}"
        revision = 2 if state in (State.CANCELLED, State.RUNNING) else 3
        records[key] = Record(key, f"p{index}", state, revision, OLD, _stamp(NOW - age * DAY))
    before = Snapshot("h", records)
    first = retention.cutoff(NOW, horizon * DAY)
    after = ledger.compact(before, first).snapshot
    assert decode(encode(after)) == after
    assert not [r for r in after.records.values() if r.state in TERMINAL and r.updated_at <= first]
    now = _stamp(NOW)
    for index, (_, _, same) in enumerate(entries):
        key = f"op-{index:02d}"
        attempt = _begin(key, f"p{index}" if same else "other", now)
        assert _answer(attempt, before) == _answer(attempt, after), key
        for target in State:
            for revision in (2, 3):
                attempt = _advance(key, revision, target, now)
                assert _answer(attempt, before) == _answer(attempt, after), (key, target)
    second_cutoff = retention.cutoff(NOW, second * DAY)
    forgotten = ledger.forget(after, second_cutoff).snapshot
    assert forgotten.records == after.records
    assert set(forgotten.tombstones) == {
        k for k, t in after.tombstones.items() if t.updated_at > second_cutoff
    }
