"""Journal records of attempts, and when a journaled attempt counts as over."""

from __future__ import annotations

import hashlib

import pytest

from durable_ops.ai_worker.journal import (
    FORGET_AFTER,
    JournalEntry,
    JournalError,
    NullJournal,
    claim_of,
)
from durable_ops.ai_worker.reconcile import attempt_over
from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.model.bounds import DEADLINE_MAX_AHEAD
from durable_ops.model.routing import Route

ENTRY = JournalEntry("0f" * 16, 2, "alice@example.com", Route.EXTERNAL)


def test_the_record_id_carries_the_owner_for_reconciling() -> None:
    assert ENTRY.record_id == f"{'0f' * 16}/2/external/alice@example.com"
    assert JournalEntry.parse(ENTRY.record_id) == ENTRY
    assert ENTRY.plan_hash == hashlib.sha256(ENTRY.record_id.encode()).hexdigest()


def test_each_claim_has_a_record_of_its_own_that_holds_nothing_of_its_lease() -> None:
    token = "t" * 43
    claimed = JournalEntry("0f" * 16, 2, "alice", Route.LOCAL, claim_of(token))
    assert claimed.record_id == f"{'0f' * 16}/2/local/alice/{claim_of(token)}"
    assert JournalEntry.parse(claimed.record_id) == claimed
    assert claim_of("another lease") != claim_of(token)
    assert token not in claimed.record_id


@pytest.mark.parametrize(
    "record_id",
    [
        "op-1",
        "op/1/local",
        "op/x/local/alice",
        "op/1/moon/alice",
        "a/1/local/b/c",
        "a/1/local/b/",
        f"a/1/local/b/{'0' * 16}/x",
    ],
)
def test_records_the_worker_did_not_write_are_refused(record_id: str) -> None:
    with pytest.raises(JournalError):
        JournalEntry.parse(record_id)


def test_the_null_journal_has_nothing_to_reconcile() -> None:
    journal = NullJournal()
    journal.start(ENTRY)
    journal.finish(ENTRY, succeeded=True)
    assert journal.unresolved() == []


def _operation(state: pb.OperationState.ValueType, attempt: int) -> pb.Operation:
    return pb.Operation(id=ENTRY.operation_id, state=state, attempt=attempt)


@pytest.mark.parametrize(
    ("state", "attempt", "over"),
    [
        (pb.OPERATION_STATE_RUNNING, 2, None),  # the dead worker's lease has not expired yet
        (pb.OPERATION_STATE_RUNNING, 3, False),  # a later attempt runs: ours is over
        (pb.OPERATION_STATE_WAITING_FOR_RETRY, 2, False),
        (pb.OPERATION_STATE_QUEUED, 2, False),
        (pb.OPERATION_STATE_SUCCEEDED, 2, True),
        (pb.OPERATION_STATE_SUCCEEDED, 3, False),  # another attempt did the work
        (pb.OPERATION_STATE_FAILED, 2, False),
        (pb.OPERATION_STATE_CANCELLED, 2, False),
    ],
)
def test_an_attempt_is_over_once_the_operation_moved_on(
    state: pb.OperationState.ValueType, attempt: int, over: bool | None
) -> None:
    assert attempt_over(_operation(state, attempt), ENTRY) is over


def test_a_settled_attempt_is_remembered_longer_than_any_attempt_can_come_back() -> None:
    """A tombstone forgotten while its attempt could still be claimed again would let a
    repeated ``begin`` start it as new; an attempt's deadline bounds when that can be."""
    assert FORGET_AFTER > DEADLINE_MAX_AHEAD
