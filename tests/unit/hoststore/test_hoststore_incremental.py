"""The incremental encoder writes exactly the bytes of the canonical encoder."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from durable_ops.hoststore import ledger
from durable_ops.hoststore.errors import HostStoreError, StoreFull
from durable_ops.hoststore.snapshot import (
    Encoded,
    IncrementalEncoder,
    Record,
    RecordMap,
    Snapshot,
    Tombstone,
    decode,
    encode,
)
from durable_ops.hoststore.transitions import ALLOWED, UNRESOLVED, State

T0 = "2026-11-30T12:00:00.000000Z"
T1 = "2026-11-30T12:00:01.000000Z"
ids = st.text(alphabet="abcdefghij0123456789/-", min_size=1, max_size=6)
changes = st.lists(
    st.tuples(ids, st.sampled_from(list(State)), st.integers(min_value=1, max_value=4)),
    min_size=1,
    max_size=300,
)


@settings(max_examples=60)
@given(changes=changes, chunk=st.sampled_from([1, 2, 3, 32, 64]))
def test_every_step_matches_the_full_encoding(
    changes: list[tuple[str, State, int]], chunk: int
) -> None:
    encoder = IncrementalEncoder()
    encoder.CHUNK = chunk  # small chunks exercise the splitting on short histories
    previous: Snapshot | None = None
    records: dict[str, Record] = {}
    for operation_id, state, revision in changes:
        records = {**records, operation_id: Record(operation_id, "h", state, revision, T0, T0)}
        snapshot = Snapshot("host-a", records)
        data = encoder.encode(snapshot, previous=previous, changed=operation_id)
        assert data == encode(snapshot)
        previous = snapshot


def test_an_unrelated_snapshot_is_encoded_from_scratch() -> None:
    encoder = IncrementalEncoder()
    first = Snapshot("host-a", {"a": Record("a", "h", State.QUEUED, 1, T0, T0)})
    encoder.encode(first)
    other = Snapshot("host-a", {"b": Record("b", "h", State.QUEUED, 1, T0, T0)})
    assert encoder.encode(other, previous=first, changed="b") == encode(other)


# A random history, mostly of steps the rules accept: begin a new id (ids spread over
# the sort order and the checksum buckets), advance the unresolved record along an
# allowed transition, replay a begin; now and then a stale revision, or a step the
# capacity refuses after it was encoded (the encoder must not build on that).
steps = st.lists(
    st.tuples(
        st.sampled_from(
            [
                *("begin", "advance", "advance", "advance", "replay", "stale", "tight"),
                *("compact", "forget", "buried"),
            ]
        ),
        st.integers(0, 10_000),
    ),
    min_size=20,
    max_size=150,
)


def _key(number: int) -> str:
    return f"{'abcdefghij'[number % 10]}-{number * 7919 % 100_000:05d}"


def _step(
    current: Snapshot, kind: str, number: int, encoder: IncrementalEncoder
) -> ledger.Change[Record] | ledger.Change[Record | Tombstone] | ledger.Retained:
    unresolved = current.unresolved()
    # Compaction moves every terminal record (all are at T1); forgetting drops some.
    if kind == "compact":
        return ledger.compact(current, T1, encoder=encoder)
    if kind == "forget":
        return ledger.forget(current, T1 if number % 3 == 0 else T0, encoder=encoder)
    if kind == "buried" and current.tombstones:
        existing = sorted(current.tombstones)[number % len(current.tombstones)]
        return ledger.begin(current, existing, "p", now=T1, encoder=encoder)
    capacity = len(encode(current)) if kind == "tight" else 1 << 24
    if kind in ("begin", "tight") and (unresolved is None or number % 2):
        return ledger.begin(current, _key(number), "p", now=T1, capacity=capacity, encoder=encoder)
    if kind == "replay" and current.records:
        existing = sorted(current.records)[number % len(current.records)]
        return ledger.begin(current, existing, "p", now=T1, encoder=encoder)
    if unresolved is None:
        return ledger.begin(current, _key(number), "p", now=T1, encoder=encoder)
    target = sorted(ALLOWED[unresolved.state])[number % len(ALLOWED[unresolved.state])]
    revision = unresolved.revision + (1 if kind == "stale" else 0)
    return ledger.advance(
        current, unresolved.id, revision, target, now=T1, capacity=capacity, encoder=encoder
    )


@settings(max_examples=60)
@given(history=steps, chunk=st.sampled_from([1, 2, 32]), retained=st.integers(0, 120))
def test_random_begin_and_advance_histories_match_the_full_encoding(
    history: list[tuple[str, int]], chunk: int, retained: int
) -> None:
    encoder = IncrementalEncoder()
    encoder.CHUNK = chunk
    current = Snapshot(
        "host-a",
        {
            f"kept-{i:03d}": Record(f"kept-{i:03d}", "p", State.SUCCEEDED, 3, T0, T0)
            for i in range(retained)
        },
    )
    written: list[tuple[Encoded, bytes]] = []
    for kind, number in history:
        try:
            change = _step(current, kind, number, encoder)
        except HostStoreError:
            continue
        if change.payload is not None:
            expected = encode(change.snapshot)
            assert bytes(change.payload) == expected
            assert len(change.payload) == len(expected)
            written.append((change.payload, expected))
        current = change.snapshot
        scanned = [r for r in current.records.values() if r.state in UNRESOLVED]
        assert len(scanned) <= 1
        assert current.unresolved() == (scanned[0] if scanned else None)
    assert decode(encode(current)) == current
    # Earlier documents are values: later changes do not alter their pieces.
    for payload, expected in written:
        assert bytes(payload) == expected


def test_a_refused_step_is_not_the_base_of_the_next_one() -> None:
    """The ledger encodes before the capacity check; the encoder must not trust that state."""
    encoder = IncrementalEncoder()
    current = ledger.begin(Snapshot("host-a", {}), "a", "p", now=T0, encoder=encoder).snapshot
    current = ledger.advance(current, "a", 1, State.CANCELLED, now=T0, encoder=encoder).snapshot
    with pytest.raises(StoreFull):
        ledger.begin(current, "b", "p", now=T0, capacity=10, encoder=encoder)
    change = ledger.begin(current, "c", "p", now=T1, encoder=encoder)
    assert change.payload is not None
    assert bytes(change.payload) == encode(change.snapshot)
    assert "b" not in decode(bytes(change.payload)).records


@settings(max_examples=60)
@given(
    base=st.dictionaries(ids, st.sampled_from(list(State)), max_size=80),
    changes=st.lists(st.tuples(ids, st.sampled_from(list(State))), max_size=300),
)
def test_a_record_map_is_an_immutable_dict(
    base: dict[str, State], changes: list[tuple[str, State]]
) -> None:
    """RecordMap shares its bulk between versions; each version must read like a dict copy."""
    model = {key: Record(key, "h", state, 1, T0, T0) for key, state in base.items()}
    current = RecordMap(model)
    history = [(current, dict(model))]
    for key, state in changes:
        record = Record(key, "h", state, 2, T0, T1)
        current = current.with_record(record)
        model[key] = record
        history.append((current, dict(model)))
    for version, expected in history:  # earlier versions are unchanged by later ones
        assert len(version) == len(expected)
        assert list(version) == list(expected), "the order of a dict: replaced keep place"
        assert dict(version.items()) == expected
        assert version == expected
        assert expected == version
        for key in [*expected, "absent"]:
            assert (key in version) == (key in expected)
            assert version.get(key) == expected.get(key)
    snapshot = Snapshot("host-a", history[-1][1])
    assert Snapshot("host-a", current) == snapshot
    assert snapshot.with_record(Record("zz", "h", State.QUEUED, 1, T0, T0)) != snapshot
    assert "zz" not in snapshot.records
