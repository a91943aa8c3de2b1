"""The PROD-003 decision rule and the worker's start-up concurrency (model.concurrency)."""

from __future__ import annotations

import pytest

from durable_ops.model.concurrency import (
    FOLLOW_BOUND,
    FOLLOW_SERVER_SLOTS,
    LATENCY_TOLERANCE,
    MIN_GAIN,
    Cell,
    Outcome,
    chosen_concurrency,
    decide,
    slots_from_props,
    slots_from_slots,
    startup_concurrency,
)


def grid(per_minute: dict[tuple[int, int], float], **p95: float) -> list[Cell]:
    """Cells (concurrency, slots) → analyses a minute; every p95 30 s unless given
    (``c2s1=40`` for concurrency 2 on 1 slot)."""
    return [
        Cell(c, s, 20, 0, rate, p95.get(f"c{c}s{s}", 30.0)) for (c, s), rate in per_minute.items()
    ]


FLAT = {(c, s): 10.0 for c in (1, 2, 4) for s in (1, 2, 4)}


def test_no_gain_anywhere_keeps_one() -> None:
    decision = decide(grid(FLAT))
    assert (decision.outcome, decision.concurrency) == (Outcome.KEEP_ONE, 1)
    assert dict(decision.chosen) == {1: 1, 2: 1, 4: 1}


def test_a_gain_below_the_threshold_is_noise() -> None:
    figures = {**FLAT, (2, 2): 11.4, (4, 4): 11.4}  # +14 %
    assert decide(grid(figures)).outcome == Outcome.KEEP_ONE


def test_gains_that_grow_with_the_slots_follow_the_server() -> None:
    figures = {**FLAT, (2, 2): 15.0, (4, 2): 15.5, (2, 4): 15.0, (4, 4): 20.0}
    decision = decide(grid(figures))
    assert decision.outcome == Outcome.FOLLOW_SLOTS
    assert decision.concurrency == FOLLOW_SERVER_SLOTS
    assert decision.bound == 4
    assert dict(decision.chosen) == {1: 1, 2: 2, 4: 4}


def test_gains_that_stop_at_two_follow_up_to_two() -> None:
    figures = {**FLAT, (2, 2): 15.0, (2, 4): 15.0, (4, 4): 16.0}
    decision = decide(grid(figures))
    assert (decision.outcome, decision.bound) == (Outcome.FOLLOW_SLOTS, 2)
    assert dict(decision.chosen) == {1: 1, 2: 2, 4: 2}


def test_the_same_gain_on_every_server_raises() -> None:
    figures = {**FLAT, (2, 1): 12.0, (2, 2): 12.0, (2, 4): 12.0}
    decision = decide(grid(figures))
    assert (decision.outcome, decision.concurrency) == (Outcome.RAISE, 2)


def test_a_gain_of_exactly_the_threshold_pays() -> None:
    cells = grid({(1, 2): 10.0, (2, 2): 10.0 * (1 + MIN_GAIN)})
    assert chosen_concurrency(cells) == 2


def test_a_tail_exactly_at_the_tolerance_is_taken() -> None:
    cells = grid({(1, 2): 10.0, (2, 2): 15.0}, c2s2=30.0 * (1 + LATENCY_TOLERANCE))
    assert chosen_concurrency(cells) == 2


def test_less_on_a_server_with_more_slots_does_not_follow_the_slots() -> None:
    # 2 on two slots, 1 on four: never past the slots, but not growing with them.
    figures = {**FLAT, (2, 2): 15.0}
    decision = decide(grid(figures))
    assert dict(decision.chosen) == {1: 1, 2: 2, 4: 1}
    assert (decision.outcome, decision.concurrency) == (Outcome.KEEP_ONE, 1)


def test_figures_that_disagree_take_the_least() -> None:
    # 4 on one slot, 2 on two: neither follows the slots nor agrees.
    figures = {**FLAT, (4, 1): 13.0, (2, 2): 13.0, (2, 4): 13.0}
    decision = decide(grid(figures))
    assert dict(decision.chosen) == {1: 4, 2: 2, 4: 2}
    assert (decision.outcome, decision.concurrency) == (Outcome.RAISE, 2)


def test_each_step_up_is_measured_against_the_one_chosen_so_far() -> None:
    # 2 gains 10 % (not enough), 4 gains 30 % over 1: 4 is chosen.
    cells = grid({(1, 4): 10.0, (2, 4): 11.0, (4, 4): 13.0})
    assert chosen_concurrency(cells) == 4
    # 2 gains 20 %, 4 only 10 % more than 2: 2 stays.
    cells = grid({(1, 4): 10.0, (2, 4): 12.0, (4, 4): 13.2})
    assert chosen_concurrency(cells) == 2


def test_a_cell_with_failures_is_not_chosen() -> None:
    cells = [Cell(1, 2, 20, 0, 10.0, 30.0), Cell(2, 2, 20, 1, 20.0, 20.0)]
    assert chosen_concurrency(cells) == 1


def test_a_worse_tail_is_not_bought_with_throughput() -> None:
    cells = grid({(1, 2): 10.0, (2, 2): 15.0}, c2s2=33.5)  # p95 +11.7 %
    assert chosen_concurrency(cells) == 1
    cells = grid({(1, 2): 10.0, (2, 2): 15.0}, c2s2=32.5)  # p95 +8.3 %
    assert chosen_concurrency(cells) == 2


def test_no_decision_without_a_sound_baseline() -> None:
    with pytest.raises(ValueError, match="baseline"):
        chosen_concurrency(grid({(2, 1): 10.0, (4, 1): 10.0}))
    with pytest.raises(ValueError, match="failed 3 of 20"):
        chosen_concurrency([Cell(1, 1, 20, 3, 8.0, 30.0), Cell(2, 1, 20, 0, 12.0, 30.0)])
    with pytest.raises(ValueError, match="baseline"):  # nothing done at concurrency 1
        chosen_concurrency([Cell(1, 1, 20, 0, 0.0, 30.0), Cell(2, 1, 20, 0, 12.0, 30.0)])
    with pytest.raises(ValueError, match="no cells"):
        decide([])
    with pytest.raises(ValueError, match="one slot count"):
        chosen_concurrency(grid({(1, 1): 10.0, (1, 2): 10.0}))


def test_a_cell_is_checked() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Cell(0, 1, 20, 0, 1.0, 1.0)
    with pytest.raises(ValueError, match="failures"):
        Cell(1, 1, 20, 21, 1.0, 1.0)


# ---- start-up ---------------------------------------------------------------------------


def test_slots_read_from_props_and_slots() -> None:
    assert slots_from_props({"total_slots": 4, "model_path": "x.gguf"}) == 4
    assert slots_from_props({"model_path": "x.gguf"}) is None  # not llama-server
    assert slots_from_props({"total_slots": 0}) is None
    assert slots_from_props({"total_slots": True}) is None
    assert slots_from_props({"total_slots": "4"}) is None
    assert slots_from_props([]) is None
    assert slots_from_slots([{"id": 0}, {"id": 1}]) == 2
    assert slots_from_slots([]) is None
    assert slots_from_slots({"error": "disabled"}) is None
    assert slots_from_slots([1, 2]) is None


def test_a_set_number_is_kept() -> None:
    assert startup_concurrency(3, 8, host_store=False).concurrency == 3
    assert startup_concurrency(1, None, host_store=True).concurrency == 1


def test_following_the_server() -> None:
    assert startup_concurrency(FOLLOW_SERVER_SLOTS, 2, host_store=False).concurrency == 2
    bounded = startup_concurrency(FOLLOW_SERVER_SLOTS, 64, host_store=False)
    assert bounded.concurrency == FOLLOW_BOUND
    assert "bounded" in bounded.why
    assert startup_concurrency(FOLLOW_SERVER_SLOTS, 64, host_store=False, bound=2).concurrency == 2
    at_bound = startup_concurrency(FOLLOW_SERVER_SLOTS, FOLLOW_BOUND, host_store=False)
    assert at_bound.concurrency == FOLLOW_BOUND
    one_more = startup_concurrency(FOLLOW_SERVER_SLOTS, FOLLOW_BOUND + 1, host_store=False)
    assert one_more.concurrency == FOLLOW_BOUND


def test_following_falls_back_to_one() -> None:
    unknown = startup_concurrency(FOLLOW_SERVER_SLOTS, None, host_store=False)
    assert unknown.concurrency == 1
    assert "/props" in unknown.why
    assert startup_concurrency(FOLLOW_SERVER_SLOTS, 4, host_store=True).concurrency == 1
