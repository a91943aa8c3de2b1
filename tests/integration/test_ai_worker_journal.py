"""The AI worker's attempt journal in a real host operation store, and reconciling it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from durable_ops import hoststore
from durable_ops.ai_worker.journal import (
    COMPACT_AFTER,
    FORGET_AFTER,
    HostStoreJournal,
    JournalEntry,
    JournalError,
    JournalLocked,
    claim_of,
    open_journal,
)
from durable_ops.ai_worker.reconcile import reconcile
from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.model.errors import NotFound, Unavailable
from durable_ops.model.routing import Route

HOST = "test-host"
FIRST = JournalEntry("a1" * 16, 1, "alice", Route.LOCAL)
SECOND = JournalEntry("a1" * 16, 1, "alice", Route.EXTERNAL)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    directory = tmp_path / "host-store"
    directory.mkdir()
    directory.chmod(0o700)
    return directory


@pytest.fixture
def journal(store: Path) -> Iterator[HostStoreJournal]:
    opened = HostStoreJournal.acquire(str(store), HOST)
    yield opened
    opened.close()


def _states(store: Path) -> dict[str, hoststore.State]:
    with hoststore.acquire(store, HOST) as session:
        return {record.id: record.state for record in session.records()}


def test_attempts_are_journaled_then_settled(store: Path, journal: HostStoreJournal) -> None:
    journal.start(FIRST)
    assert journal.unresolved() == [FIRST]
    journal.finish(FIRST, succeeded=False)
    journal.start(SECOND)  # the fallback claim of the same attempt has a record of its own
    journal.finish(SECOND, succeeded=True)
    assert journal.unresolved() == []
    journal.close()
    assert _states(store) == {
        FIRST.record_id: hoststore.State.FAILED_RECOVERED,
        SECOND.record_id: hoststore.State.SUCCEEDED,
    }


def test_taking_the_store_compacts_old_attempts_and_forgets_older_tombstones(store: Path) -> None:
    started = datetime(2026, 1, 1, tzinfo=UTC)
    now = [started]
    first = HostStoreJournal.acquire(str(store), HOST, clock=lambda: now[0])
    first.start(FIRST)
    first.finish(FIRST, succeeded=True)
    first.close()

    now[0] = started + COMPACT_AFTER + timedelta(seconds=1)
    second = HostStoreJournal.acquire(str(store), HOST, clock=lambda: now[0])
    second.start(FIRST)  # the same attempt again: replayed from its tombstone, not re-run
    assert second.unresolved() == []
    second.start(SECOND)  # a live attempt is never compacted
    second.close()
    with hoststore.acquire(store, HOST) as session:
        assert [tomb.id for tomb in session.tombstones()] == [FIRST.record_id]
        assert [record.id for record in session.records()] == [SECOND.record_id]

    now[0] = started + FORGET_AFTER + timedelta(days=1)
    third = HostStoreJournal.acquire(str(store), HOST, clock=lambda: now[0])
    assert third.unresolved() == [SECOND]
    third.close()
    with hoststore.acquire(store, HOST) as session:
        assert session.tombstones() == ()


def test_a_second_worker_on_the_host_is_refused(store: Path, journal: HostStoreJournal) -> None:
    with pytest.raises(JournalLocked, match="another AI worker holds the host store"):
        open_journal(str(store), HOST)


def test_an_unfinished_attempt_survives_a_crash(store: Path) -> None:
    crashed = HostStoreJournal.acquire(str(store), HOST)
    crashed.start(FIRST)
    crashed.close()  # what the kernel does for a killed process
    # Marked running before the model saw anything: the store says it ran (or may have).
    assert _states(store) == {FIRST.record_id: hoststore.State.RUNNING}
    restarted = HostStoreJournal.acquire(str(store), HOST)
    try:
        assert restarted.unresolved() == [FIRST]
        with pytest.raises(JournalError):
            restarted.start(SECOND)  # nothing new before the old attempt is settled
    finally:
        restarted.close()


def test_a_record_of_someone_else_is_not_guessed_at(store: Path) -> None:
    with hoststore.acquire(store, HOST) as session:
        session.begin("deploy-7", "f" * 64)
    journal = HostStoreJournal.acquire(str(store), HOST)
    try:
        with pytest.raises(JournalError, match="not written by an AI worker"):
            journal.unresolved()
    finally:
        journal.close()


class Operations:
    """Answers GetOperation from a script, one answer per call."""

    def __init__(self, *answers: pb.Operation | Exception) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[str, str]] = []

    async def get(self, owner_id: str, operation_id: str) -> pb.Operation:
        self.calls.append((owner_id, operation_id))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def _op(state: pb.OperationState.ValueType, attempt: int = 1) -> pb.Operation:
    return pb.Operation(id=FIRST.operation_id, state=state, attempt=attempt)


@pytest.mark.parametrize(
    ("answers", "settled"),
    [
        (
            [
                _op(pb.OPERATION_STATE_RUNNING),
                Unavailable("down"),
                _op(pb.OPERATION_STATE_WAITING_FOR_RETRY),
            ],
            hoststore.State.FAILED_RECOVERED,
        ),
        ([_op(pb.OPERATION_STATE_SUCCEEDED)], hoststore.State.SUCCEEDED),
        ([NotFound("deleted")], hoststore.State.FAILED_RECOVERED),
    ],
)
def test_reconciling_waits_for_the_real_state(
    store: Path, answers: list[pb.Operation | Exception], settled: hoststore.State
) -> None:
    crashed = HostStoreJournal.acquire(str(store), HOST)
    crashed.start(FIRST)
    crashed.close()
    operations = Operations(*answers)
    journal = HostStoreJournal.acquire(str(store), HOST)
    try:
        asyncio.run(reconcile(journal, operations, asyncio.Event(), poll_seconds=0.01))
        assert journal.unresolved() == []
    finally:
        journal.close()
    assert operations.calls == [("alice", FIRST.operation_id)] * len(answers)
    assert _states(store) == {FIRST.record_id: settled}


def test_an_attempt_begun_but_never_marked_running_is_reconciled_too(store: Path) -> None:
    """A worker killed between the two writes of ``start`` left the record queued: the
    claim was taken, so the attempt may have run; reconciling settles it all the same."""
    with hoststore.acquire(store, HOST) as session:
        session.begin(FIRST.record_id, FIRST.plan_hash)
    operations = Operations(_op(pb.OPERATION_STATE_WAITING_FOR_RETRY))
    journal = HostStoreJournal.acquire(str(store), HOST)
    try:
        assert journal.unresolved() == [FIRST]
        asyncio.run(reconcile(journal, operations, asyncio.Event(), poll_seconds=0.01))
        assert journal.unresolved() == []
    finally:
        journal.close()
    assert _states(store) == {FIRST.record_id: hoststore.State.FAILED_RECOVERED}


def test_an_attempt_handed_back_and_claimed_again_is_journaled_again(
    journal: HostStoreJournal,
) -> None:
    """A release gives the attempt number back (``model.lifecycle``), so the next claim on
    this host is the same attempt on the same route: its own record shows it running, for
    a worker dying in it leaves that to reconcile; settling a record again, as a record
    from before claims were kept is, must not fail the journal (it would stop the worker)."""
    released = JournalEntry("a1" * 16, 1, "alice", Route.LOCAL, claim_of("first lease"))
    journal.start(released)
    journal.finish(released, succeeded=False)  # released at a stop: not completed
    again = JournalEntry("a1" * 16, 1, "alice", Route.LOCAL, claim_of("second lease"))
    journal.start(again)  # claimed again after the restart
    assert journal.unresolved() == [again]
    journal.finish(again, succeeded=True)
    assert journal.unresolved() == []
    journal.start(FIRST)  # four parts: one record for both claims
    journal.finish(FIRST, succeeded=False)
    journal.start(FIRST)
    journal.finish(FIRST, succeeded=True)
    assert journal.unresolved() == []
