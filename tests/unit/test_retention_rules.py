"""Retention's pure rules (ADR 0021): horizons that keep keys longer than records."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from durable_ops.model import bounds
from durable_ops.model.errors import Conflict, InvalidArgument
from durable_ops.model.retention import (
    OPERATION_PRUNED,
    PRUNE_BATCH,
    RetentionPolicy,
    batch_size,
    policy_of_days,
    pruned,
)

NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)


def test_both_horizons_count_back_from_now() -> None:
    policy = policy_of_days(30, 400)
    assert policy.operations_finished_before(NOW) == NOW - timedelta(days=30)
    assert policy.tombstones_finished_before(NOW) == NOW - timedelta(days=400)


@pytest.mark.parametrize(
    ("operations", "tombstones", "field"),
    [
        (timedelta(0), timedelta(days=1), "older_than"),
        (timedelta(days=-1), timedelta(days=1), "older_than"),
        (timedelta(days=30), timedelta(days=7), "tombstones_older_than"),
        (timedelta(days=30), timedelta(days=99999), "tombstones_older_than"),
    ],
)
def test_a_policy_that_would_forget_a_key_before_its_record_is_refused(
    operations: timedelta, tombstones: timedelta, field: str
) -> None:
    with pytest.raises(InvalidArgument) as refused:
        RetentionPolicy(operations, tombstones).validated()
    assert refused.value.field == field


def test_equal_horizons_are_allowed() -> None:
    assert RetentionPolicy(timedelta(days=7), timedelta(days=7)).validated()


def test_the_longest_horizon_is_allowed_to_the_instant() -> None:
    """The bound is inclusive, and nothing past it: ``opsctl operations prune`` states it."""
    longest = bounds.OLDER_THAN_MAX
    assert RetentionPolicy(longest, longest).validated() == RetentionPolicy(longest, longest)
    with pytest.raises(InvalidArgument) as refused:
        RetentionPolicy(longest, longest + timedelta(microseconds=1)).validated()
    assert refused.value.field == "tombstones_older_than"


def test_batch_size_zero_is_the_default_and_the_rest_is_bounded() -> None:
    assert batch_size(0) == PRUNE_BATCH
    assert batch_size(1) == 1
    for bad in (-1, 5001):
        with pytest.raises(InvalidArgument, match="batch_size"):
            batch_size(bad)


def test_a_pruned_key_is_answered_with_its_day_and_state() -> None:
    answer = pruned("failed", datetime(2026, 10, 2, 23, 59, tzinfo=UTC))
    assert isinstance(answer, Conflict)
    assert answer.code == OPERATION_PRUNED
    assert answer.message.startswith("This request finished on 2026-10-02 (failed)")
    assert "removed" in answer.message
