"""Which leases one lease stream holds, beat after beat (``model.held_leases``): pure."""

from __future__ import annotations

import pytest

from durable_ops.model.drafts import ANSWER_DRAFT_MAX_BYTES, DRAFT_TOO_LARGE
from durable_ops.model.errors import InvalidArgument
from durable_ops.model.held_leases import (
    DEFAULT_LEASE_SECONDS,
    LEASE_NOT_HELD,
    NAMED_TWICE,
    TOO_MANY_LEASES,
    Entry,
    HeldLease,
    HeldLeases,
)

TOKEN = "t" * 43


def _add(operation_id: str, owner: str = "alice", **fields: object) -> Entry:
    return Entry(operation_id, owner, TOKEN, **fields)  # type: ignore[arg-type]


def test_added_leases_are_held_in_order_and_every_beat_names_them_all() -> None:
    held = HeldLeases()
    beat = held.apply([_add("a"), _add("b", "bob", lease_seconds=60)], [])
    assert beat.held == [
        HeldLease("a", "alice", TOKEN, DEFAULT_LEASE_SECONDS),
        HeldLease("b", "bob", TOKEN, 60),
    ]
    assert beat.refused == {}
    assert [lease.operation_id for lease in held.apply([], []).held] == ["a", "b"]


def test_progress_goes_with_its_beat_only_and_a_held_lease_keeps_its_owner_and_token() -> None:
    held = HeldLeases()
    held.apply([_add("a", lease_seconds=60), _add("b")], [])
    beat = held.apply([Entry("a", progress=40)], [])
    assert [(lease.operation_id, lease.progress) for lease in beat.held] == [("a", 40), ("b", None)]
    assert beat.held[0] == HeldLease("a", "alice", TOKEN, 60, 40)
    assert [lease.progress for lease in held.apply([], []).held] == [None, None]
    longer = held.apply([Entry("a", lease_seconds=120)], []).held[0]
    assert (longer.owner_id, longer.token, longer.lease_seconds) == ("alice", TOKEN, 120)


def test_a_new_token_for_a_held_operation_replaces_its_lease() -> None:
    held = HeldLeases()
    held.apply([_add("a")], [])
    beat = held.apply([Entry("a", "alice", "n" * 43)], [])
    assert beat.held == [HeldLease("a", "alice", "n" * 43, DEFAULT_LEASE_SECONDS)]


def test_a_held_operation_named_under_another_owner_is_not_that_lease() -> None:
    """The beat's UPDATE binds the owner it names: the held lease's owner is not kept for
    it (with a token it replaces the lease, without one it is refused)."""
    held = HeldLeases()
    held.apply([_add("a")], [])
    beat = held.apply([Entry("a", "bob", TOKEN)], [])
    assert beat.held == [HeldLease("a", "bob", TOKEN, DEFAULT_LEASE_SECONDS)]
    refused = held.apply([Entry("a", "carol")], []).refused["a"]
    assert isinstance(refused, InvalidArgument)
    assert refused.code == LEASE_NOT_HELD


def test_dropped_and_lost_leases_leave_the_stream() -> None:
    held = HeldLeases()
    held.apply([_add("a"), _add("b"), _add("c")], [])
    held.lose("b")
    beat = held.apply([], ["c", "never-held"])
    assert [lease.operation_id for lease in beat.held] == ["a"]
    assert "c" not in held
    assert len(held) == 1


@pytest.mark.parametrize(
    ("entry", "field", "code"),
    [
        (_add("a", lease_seconds=4), "lease_seconds", "invalid_argument"),
        (_add("a", lease_seconds=601), "lease_seconds", "invalid_argument"),
        (_add("a", progress=101), "progress_percent", "invalid_argument"),
        (_add("a", progress=-1), "progress_percent", "invalid_argument"),
        (_add("a", owner="x" * 65), "owner", "invalid_argument"),
        (Entry("a", "alice", "t" * 129), "lease_token", "invalid_argument"),
        (Entry("a", progress=5), "lease_token", LEASE_NOT_HELD),
        (Entry("a", "alice"), "lease_token", LEASE_NOT_HELD),
        (_add("i" * 65), "operation_id", "invalid_argument"),
    ],
)
def test_a_bad_entry_is_refused_alone(entry: Entry, field: str, code: str) -> None:
    held = HeldLeases()
    held.apply([_add("ok")], [])
    beat = held.apply([entry], [])
    refusal = beat.refused[entry.operation_id]
    assert isinstance(refusal, InvalidArgument)
    assert (refusal.field, refusal.code) == (field, code)
    assert [lease.operation_id for lease in beat.held] == ["ok"]
    assert entry.operation_id not in held


def test_an_answer_text_of_the_whole_budget_is_held_and_a_byte_more_refused() -> None:
    """Counted in UTF-8 bytes: the worker cuts its text to exactly the budget (``clipped``)."""
    held = HeldLeases()
    whole = "é" * (ANSWER_DRAFT_MAX_BYTES // 2)
    beat = held.apply([_add("a", answer_text=whole), _add("b", answer_text=whole + "x")], [])
    assert [(lease.operation_id, lease.answer_text) for lease in beat.held] == [("a", whole)]
    refusal = beat.refused["b"]
    assert isinstance(refusal, InvalidArgument)
    assert (refusal.field, refusal.code) == ("answer_text", DRAFT_TOO_LARGE)


def test_a_refused_entry_for_a_held_lease_ends_that_lease() -> None:
    held = HeldLeases()
    held.apply([_add("a"), _add("b")], [])
    beat = held.apply([Entry("a", progress=101)], [])
    assert list(beat.refused) == ["a"]
    assert [lease.operation_id for lease in beat.held] == ["b"]


@pytest.mark.parametrize(
    ("entries", "dropped", "code"),
    [
        ([_add("")], [], "invalid_argument"),
        ([_add("a"), Entry("a", progress=3)], [], NAMED_TWICE),
        ([_add("a")], ["a"], NAMED_TWICE),
    ],
)
def test_a_request_that_is_not_a_beat_is_refused_whole(
    entries: list[Entry], dropped: list[str], code: str
) -> None:
    held = HeldLeases()
    held.apply([_add("kept")], [])
    with pytest.raises(InvalidArgument) as refused:
        held.apply(entries, dropped)
    assert refused.value.code == code
    assert [lease.operation_id for lease in held] == ["kept"]


def test_a_stream_holds_a_bounded_number_of_leases() -> None:
    held = HeldLeases(max_leases=2)
    held.apply([_add("a"), _add("b")], [])
    with pytest.raises(InvalidArgument) as refused:
        held.apply([_add("c")], [])
    assert refused.value.code == TOO_MANY_LEASES
    assert [lease.operation_id for lease in held] == ["a", "b"]
    assert len(held.apply([_add("c")], ["a"]).held) == 2
    with pytest.raises(InvalidArgument) as too_many:  # before any entry is looked at
        held.apply([Entry("d"), Entry("e"), Entry("")], [])
    assert too_many.value.code == TOO_MANY_LEASES
