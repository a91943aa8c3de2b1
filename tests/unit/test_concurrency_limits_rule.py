"""The claim's concurrency decision (ADR 0048), pure: who may start, in queue order."""

from __future__ import annotations

from dataclasses import replace

import pytest

from durable_ops.model.concurrency_limits import (
    Candidate,
    Concurrency,
    admitted,
    capacity,
    key_slot,
    slots_of,
    type_slot,
)
from durable_ops.model.errors import InvalidArgument
from durable_ops.model.tasks import CV_REVIEW, STRATEGY_SNAPSHOT, Registry

LIMITS = {"keyed": Concurrency(per_key=2, total=3), "capped": Concurrency(total=1)}


def _keyed(owner: str, key: str) -> Candidate:
    return Candidate("keyed", key_slot("keyed", owner, key))


def test_a_key_and_the_type_both_need_room_counting_this_claims_own_starts() -> None:
    candidates = [
        _keyed("alice", "a"),
        _keyed("alice", "a"),
        _keyed("alice", "a"),  # alice's key a is full
        _keyed("bob", "a"),  # bob's "a" is another key
        _keyed("alice", "b"),  # the type is full
    ]
    chosen, counts = admitted(candidates, {}, LIMITS)
    assert chosen == [True, True, False, True, False]
    assert counts[type_slot("keyed")] == 3
    assert counts[key_slot("keyed", "alice", "a")] == 2
    assert counts[key_slot("keyed", "bob", "a")] == 1


def test_what_already_runs_counts() -> None:
    running = {type_slot("keyed"): 2, key_slot("keyed", "alice", "a"): 2}
    chosen, _ = admitted([_keyed("alice", "a"), _keyed("alice", "b")], running, LIMITS)
    assert chosen == [False, True]


def test_a_type_limited_only_in_total_holds_no_key_slot() -> None:
    assert slots_of("capped", "alice", "a", LIMITS["capped"]) == ("capped|", None)
    chosen, counts = admitted([Candidate("capped", None)] * 2, {}, LIMITS)
    assert chosen == [True, False]
    assert counts == {"capped|": 1}


@pytest.mark.parametrize("bad", [{"per_key": 0}, {"total": -1}, {"total": 100_001}])
def test_a_limit_is_at_least_one(bad: dict[str, int]) -> None:
    with pytest.raises(InvalidArgument):
        Concurrency(**bad)
    assert not Concurrency().limited


def test_a_type_with_either_limit_alone_is_one_the_claim_counts() -> None:
    """A type limited only per key, or only in total, is in the registry's limits: else
    its claim would count nothing and run any number at once."""
    per_key = replace(STRATEGY_SNAPSHOT, concurrency=Concurrency(per_key=1))
    total = replace(CV_REVIEW, concurrency=Concurrency(total=2))
    limits = Registry.of(per_key, total).limits()
    assert dict(limits) == {per_key.name: Concurrency(per_key=1), total.name: Concurrency(total=2)}
    assert dict(Registry.of(replace(CV_REVIEW, concurrency=Concurrency())).limits()) == {}


def test_a_key_may_hold_the_slot_ids_separator() -> None:
    """A key is the create's (or a subject id): free text, so a "|" in it names no type."""
    slot = key_slot("keyed", "alice", "a|b")
    assert capacity(slot, LIMITS) == 2
    chosen, counts = admitted([Candidate("keyed", slot)] * 3, {}, LIMITS)
    assert chosen == [True, True, False]
    assert counts[slot] == 2
