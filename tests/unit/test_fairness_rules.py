"""Turns and aging within a priority (``model.fairness``, ADR 0049), pure."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from durable_ops.model import bounds, fairness
from durable_ops.model.errors import InvalidArgument

NOW = datetime(2026, 12, 5, 9, 0, tzinfo=UTC)


def test_an_owner_idle_for_a_while_banks_no_turns() -> None:
    """Its last turn, an hour old, would put a burst of its new work ahead of every turn
    given since: it starts at the head of the line, as an owner with nothing waiting."""
    head = fairness.micros(NOW)
    hour_ago = fairness.micros(NOW - timedelta(hours=1))
    assert fairness.start_tag(head=head, owner_last=hour_ago, share=None, now=NOW) == head
    # An owner with work in the line waits a stride behind its own last turn.
    ahead = head + 5 * fairness.STRIDE
    assert fairness.start_tag(head=head, owner_last=ahead, share=None, now=NOW) == (
        ahead + fairness.STRIDE
    )


@pytest.mark.parametrize("weight", [0, -1, fairness.WEIGHT_RANGE[1] + 1])
def test_a_weight_out_of_range_is_refused(weight: int) -> None:
    with pytest.raises(InvalidArgument):
        fairness.weight(weight)


def test_aging_rises_a_level_a_step_and_stops_at_its_bound() -> None:
    step = fairness.AGING_STEP
    assert fairness.aged_priority(0, step - timedelta(microseconds=1)) == 0
    assert fairness.aged_priority(0, step) == 1
    assert fairness.aged_priority(0, step * fairness.AGING_MAX) == fairness.AGING_MAX
    assert fairness.aged_priority(0, step * (fairness.AGING_MAX + 1)) == fairness.AGING_MAX
    assert fairness.aged_priority(0, step * 1000) == fairness.AGING_MAX
    top = bounds.PRIORITY_RANGE[1]
    assert fairness.aged_priority(top - 1, step * 1000) == top


def test_a_wait_that_has_not_begun_lowers_no_priority() -> None:
    """A clock read before the operation's due time (another replica's, a little behind)
    leaves it at the priority it has."""
    assert fairness.aged_priority(3, -fairness.AGING_STEP * 2) == 3
