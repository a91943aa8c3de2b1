"""The incremental encoder writes exactly the bytes of the canonical encoder."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from services.hoststore.snapshot import IncrementalEncoder, Record, Snapshot, encode
from services.hoststore.transitions import State

T0 = "2026-11-30T12:00:00.000000Z"
ids = st.text(alphabet="abcdefghij0123456789/-", min_size=1, max_size=6)
changes = st.lists(
    st.tuples(ids, st.sampled_from(list(State)), st.integers(min_value=1, max_value=4)),
    min_size=1,
    max_size=300,
)


@settings(max_examples=60, deadline=None)
@given(changes=changes, chunk=st.sampled_from([1, 2, 3, 64]))
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
