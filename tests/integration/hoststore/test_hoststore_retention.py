"""Compaction, forgetting and batches through a real session on a real directory.

The long test drives 100,000 begin/advance cycles with compaction every 10,000
and checks that state.json stays under 2 MiB and that every compacted id still
replays or conflicts. It saves through ``Session.batch`` (one real save of the
whole snapshot per 250 cycles: temp file, fsync, rename, directory fsync); the
same loop saving every call would take far too long for CI (its rate is
printed by ``test_unbatched_cycles_with_compaction``).
"""

from __future__ import annotations

import io
import json
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from durable_ops.hoststore import (
    ForbiddenTransition,
    InvalidInput,
    PlanHashConflict,
    Record,
    RevisionMismatch,
    Session,
    SessionClosed,
    SessionPoisoned,
    State,
    Tombstone,
    UnknownOperation,
    UnresolvedOperation,
    acquire,
    show,
    statefile,
)
from durable_ops.hoststore.filesystem import FileSystem
from durable_ops.hoststore.snapshot import format_timestamp
from tests.support.figures import report

HOST = "runner-1"
START = datetime(2026, 1, 1, tzinfo=UTC)
DAY = timedelta(days=1)
MIB = 1024 * 1024


@pytest.fixture
def store(tmp_path: Path) -> Path:
    directory = tmp_path / "store"
    directory.mkdir()
    directory.chmod(0o700)
    return directory


class Clock:
    """A settable clock: tests move it, and every read returns the current value."""

    def __init__(self, now: datetime = START) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


class CountingFileSystem(FileSystem):
    def __init__(self) -> None:
        self.calls: list[str] = []

    def fsync(self, fd: int) -> None:
        self.calls.append("fsync")
        super().fsync(fd)

    def rename(self, source: str, target: str, *, dir_fd: int) -> None:
        self.calls.append("rename")
        super().rename(source, target, dir_fd=dir_fd)


def _finish(session: Session, key: str, plan: str, target: State) -> None:
    record, created = session.begin(key, plan)
    assert created
    if target is State.CANCELLED:
        session.advance(key, record.revision, State.CANCELLED)
        return
    running = session.advance(key, record.revision, State.RUNNING)
    session.advance(key, running.revision, target)


def _state(store: Path) -> dict[str, object]:
    body: dict[str, object] = json.loads((store / "state.json").read_bytes())["body"]
    return body


def test_compaction_turns_old_terminal_records_into_tombstones_that_persist(store: Path) -> None:
    clock = Clock()
    with acquire(store, HOST, clock=clock) as session:
        _finish(session, "op-old", "plan-old", State.SUCCEEDED)
        _finish(session, "op-cancelled", "plan-c", State.CANCELLED)
        clock.now += 10 * DAY
        _finish(session, "op-recent", "plan-recent", State.FAILED_RECOVERED)
        session.begin("op-live", "plan-live")
        clock.now += DAY
        assert session.compact(older_than=7 * DAY) == 2
        assert [r.id for r in session.records()] == ["op-live", "op-recent"]
        assert [t.id for t in session.tombstones()] == ["op-cancelled", "op-old"]
        old = session.get("op-old")
        assert old == Tombstone(
            "op-old", "plan-old", State.SUCCEEDED, 3, "2026-01-01T00:00:00.000000Z"
        )
        assert session.compact(older_than=7 * DAY) == 0
    body = _state(store)
    assert body["version"] == 3
    assert body["tombstones"] == {
        "op-cancelled": ["plan-c", 2, "cancelled", "2026-01-01T00:00:00.000000Z"],
        "op-old": ["plan-old", 3, "succeeded", "2026-01-01T00:00:00.000000Z"],
    }
    assert sorted(body["operations"]) == ["op-live", "op-recent"]  # type: ignore[call-overload]

    with acquire(store, HOST, clock=clock) as session:
        # Same hash: the original outcome, nothing written. Other hash: a conflict.
        before = (store / "state.json").read_bytes()
        assert session.begin("op-old", "plan-old") == (old, False)
        assert session.begin("op-cancelled", "plan-c")[0].state is State.CANCELLED
        with pytest.raises(PlanHashConflict):
            session.begin("op-old", "plan-new")
        with pytest.raises(RevisionMismatch):
            session.advance("op-old", 2, State.SUCCEEDED)
        with pytest.raises(ForbiddenTransition):
            session.advance("op-old", 3, State.RUNNING)
        assert (store / "state.json").read_bytes() == before
        # The live record still blocks new ids, as before compaction.
        with pytest.raises(UnresolvedOperation):
            session.begin("op-next", "plan-next")
        session.advance("op-live", 1, State.CANCELLED)
        assert session.begin("op-next", "plan-next")[1]


def test_a_zero_horizon_compacts_every_terminal_record_and_never_a_live_one(store: Path) -> None:
    with acquire(store, HOST, clock=Clock()) as session:
        _finish(session, "a", "p", State.SUCCEEDED)
        session.begin("b", "p")
        session.advance("b", 1, State.RUNNING)
        assert session.compact(older_than=timedelta(0)) == 1
        assert isinstance(session.get("b"), Record)
        assert session.unresolved() == session.get("b")
        assert isinstance(session.get("a"), Tombstone)


def test_now_may_be_given_and_defaults_to_the_session_clock(store: Path) -> None:
    clock = Clock()
    with acquire(store, HOST, clock=clock) as session:
        _finish(session, "a", "p", State.SUCCEEDED)
        assert session.compact(older_than=DAY) == 0
        assert session.compact(older_than=DAY, now=START + DAY) == 1
        assert session.forget(older_than=30 * DAY, now=START + 29 * DAY) == 0
        clock.now += 30 * DAY
        assert session.forget(older_than=30 * DAY) == 1
        with pytest.raises(UnknownOperation):
            session.get("a")
        assert session.tombstones() == ()


@pytest.mark.parametrize(
    "arguments",
    [
        {"older_than": timedelta(seconds=-1)},
        {"older_than": 7},
        {"older_than": DAY, "now": datetime(2026, 1, 1)},  # naive
    ],
)
def test_bad_arguments_are_refused_without_poisoning(
    store: Path, arguments: dict[str, object]
) -> None:
    with acquire(store, HOST) as session:
        for retain in (session.compact, session.forget):
            with pytest.raises(InvalidInput):
                retain(**arguments)  # type: ignore[arg-type]
        assert not session.poisoned


def test_a_closed_or_poisoned_session_refuses_retention(store: Path) -> None:
    session = acquire(store, HOST)
    session.close()
    with pytest.raises(SessionClosed):
        session.compact(older_than=DAY)
    with pytest.raises(SessionClosed):
        session.forget(older_than=DAY)
    with pytest.raises(SessionClosed):
        session.tombstones()

    session = acquire(store, HOST)
    session._poison = "test"
    with pytest.raises(SessionPoisoned):
        session.compact(older_than=DAY)
    session.close()


def test_compaction_is_saved_like_any_other_change(store: Path) -> None:
    fs = CountingFileSystem()
    with acquire(store, HOST, filesystem=fs, clock=Clock()) as session:
        _finish(session, "a", "p", State.SUCCEEDED)
        fs.calls.clear()
        assert session.compact(older_than=timedelta(0)) == 1
        assert fs.calls == ["fsync", "rename", "fsync"], "temp fsync, rename, directory fsync"
        fs.calls.clear()
        assert session.compact(older_than=timedelta(0)) == 0
        assert session.forget(older_than=DAY) == 0
        assert fs.calls == [], "nothing to do writes nothing"
    assert [n for n in os.listdir(store) if statefile.TEMP_PATTERN.fullmatch(n)] == []


def test_a_batch_saves_once_all_or_nothing(store: Path) -> None:
    fs = CountingFileSystem()
    with acquire(store, HOST, filesystem=fs, clock=Clock()) as session:
        fs.calls.clear()
        with session.batch():
            _finish(session, "a", "p", State.SUCCEEDED)
            with session.batch():  # nested: only the outermost saves
                _finish(session, "b", "p", State.CANCELLED)
            assert fs.calls == []
            assert session.get("b").state is State.CANCELLED
            assert session.compact(older_than=timedelta(0)) == 2
        assert fs.calls == ["fsync", "rename", "fsync"]
        saved = (store / "state.json").read_bytes()

        def given_up() -> None:
            with session.batch():
                _finish(session, "c", "p", State.SUCCEEDED)
                raise RuntimeError("the caller gives up")

        with pytest.raises(RuntimeError):
            given_up()
        with pytest.raises(UnknownOperation):
            session.get("c")
        assert (store / "state.json").read_bytes() == saved
        # After a discarded batch the next change is encoded from the saved snapshot.
        _finish(session, "d", "p", State.SUCCEEDED)
    with acquire(store, HOST) as session:
        assert [t.id for t in session.tombstones()] == ["a", "b"]
        assert [r.id for r in session.records()] == ["d"]


def test_a_batch_whose_session_was_closed_inside_it_saves_nothing(store: Path) -> None:
    """Closing inside a batch discards it: nothing is written through the closed descriptors."""
    fs = CountingFileSystem()
    session = acquire(store, HOST, filesystem=fs, clock=Clock())
    saved = (store / "state.json").read_bytes()
    fs.calls.clear()
    with session.batch():
        session.begin("a", "p")
        session.close()
    assert fs.calls == []
    assert (store / "state.json").read_bytes() == saved
    with acquire(store, HOST) as reopened:
        assert reopened.records() == ()


def test_show_reports_tombstones(store: Path) -> None:
    clock = Clock()
    with acquire(store, HOST, clock=clock) as session:
        _finish(session, "op-1", "0123456789abcdef0123", State.SUCCEEDED)
        _finish(session, "op-2", "feedfacefeedface", State.CANCELLED)
        session.begin("op-3", "cafe")
        assert session.compact(older_than=timedelta(0)) == 2
    out = io.StringIO()
    assert show(store, as_json=False, out=out) == 0
    text = out.getvalue()
    assert "operations: 1 (unresolved: op-3)" in text
    assert "tombstones (compacted, still answer begin): 2" in text
    row = next(line for line in text.splitlines() if line.startswith("op-1 "))
    assert row.split() == ["op-1", "succeeded", "3", "0123456789ab", "2026-01-01T00:00:00.000000Z"]
    out = io.StringIO()
    assert show(store, as_json=True, out=out) == 0
    document = json.loads(out.getvalue())
    assert [op["id"] for op in document["operations"]] == ["op-3"]
    assert document["tombstones"] == [
        {
            "id": "op-1",
            "state": "succeeded",
            "revision": 3,
            "plan_hash_prefix": "0123456789ab",
            "updated_at": "2026-01-01T00:00:00.000000Z",
        },
        {
            "id": "op-2",
            "state": "cancelled",
            "revision": 2,
            "plan_hash_prefix": "feedfacefeed",
            "updated_at": "2026-01-01T00:00:00.000000Z",
        },
    ]


# The long run. Cycle i begins op-i and takes it to a terminal state (cancelled,
# succeeded or failed_recovered: two or three saves' worth of changes) at time
# START + i seconds. Every 10,000 cycles: compact what finished at least
# COMPACT_AFTER cycles ago, then forget tombstones at least FORGET_AFTER old.
CYCLES = 100_000
COMPACT_EVERY = 10_000
COMPACT_AFTER = 1_000
FORGET_AFTER = 3_000
BATCH = 250
TARGETS = (State.CANCELLED, State.SUCCEEDED, State.FAILED_RECOVERED)


def _key(cycle: int) -> str:
    return f"op-{cycle:06d}"


def _plan(cycle: int) -> str:
    return f"plan-{cycle}"


def _cycles(session: Session, clock: Clock, first: int, last: int) -> None:
    for cycle in range(first, last):
        clock.now = START + timedelta(seconds=cycle)
        _finish(session, _key(cycle), _plan(cycle), TARGETS[cycle % 3])


def _check_answers(session: Session, cycles: range, forgotten_below: int) -> None:
    """Each id of ``cycles`` answers as the seed requires, or is forgotten if old enough."""
    for cycle in cycles:
        key = _key(cycle)
        if cycle < forgotten_below:
            with pytest.raises(UnknownOperation):
                session.get(key)
            continue
        found, created = session.begin(key, _plan(cycle))
        assert not created
        finished = format_timestamp(START + timedelta(seconds=cycle))
        assert (found.id, found.state, found.updated_at) == (key, TARGETS[cycle % 3], finished)
        with pytest.raises(PlanHashConflict):
            session.begin(key, "another-plan")


@pytest.mark.slow
def test_100k_cycles_with_compaction_stay_under_2_mib(store: Path) -> None:
    clock = Clock()
    largest = 0
    compacted_through = forgotten_below = 0
    started = time.perf_counter()
    with acquire(store, HOST, clock=clock) as session:
        for first in range(0, CYCLES, BATCH):
            with session.batch():
                _cycles(session, clock, first, first + BATCH)
            largest = max(largest, (store / "state.json").stat().st_size)
            done = first + BATCH
            if done % COMPACT_EVERY:
                continue
            now = START + timedelta(seconds=done)
            # What finished at or before done - COMPACT_AFTER and was still live.
            compacted = session.compact(older_than=timedelta(seconds=COMPACT_AFTER), now=now)
            assert compacted == done - COMPACT_AFTER + 1 - compacted_through
            newly_compacted = range(compacted_through, done - COMPACT_AFTER + 1)
            compacted_through = newly_compacted.stop
            forgotten = session.forget(older_than=timedelta(seconds=FORGET_AFTER), now=now)
            assert forgotten == done - FORGET_AFTER + 1 - forgotten_below
            newly_forgotten = range(forgotten_below, done - FORGET_AFTER + 1)
            forgotten_below = newly_forgotten.stop
            assert len(session.tombstones()) == compacted_through - forgotten_below
            assert len(session.records()) == done - compacted_through
            # Every id compacted just now answers from its tombstone (unless already
            # forgotten); the final check, after reopening, covers all 100,000 ids.
            _check_answers(session, newly_compacted, forgotten_below)
            _check_answers(session, newly_forgotten, forgotten_below)
    elapsed = time.perf_counter() - started
    size = (store / "state.json").stat().st_size
    report(
        f"\n{CYCLES} cycles in {elapsed:.1f} s ({CYCLES / elapsed:.0f} cycles/s, one save per"
        f" {BATCH} cycles); state.json at the end {size} bytes, at most {largest} bytes"
        f" ({largest / MIB:.2f} MiB)"
    )
    assert largest < 2 * MIB
    with acquire(store, HOST) as session:  # what was saved answers the same once reopened
        _check_answers(session, range(CYCLES), forgotten_below)
        assert len(session.tombstones()) == compacted_through - forgotten_below
        assert len(session.records()) == COMPACT_AFTER - 1


def test_unbatched_cycles_with_compaction(store: Path) -> None:
    """The same loop, shorter, with a real save on every call; prints its rate."""
    cycles, every, compact_after, forget_after = 150, 50, 20, 60
    clock = Clock()
    started = time.perf_counter()
    largest = 0
    with acquire(store, HOST, clock=clock) as session:
        for first in range(0, cycles, every):
            _cycles(session, clock, first, first + every)
            largest = max(largest, (store / "state.json").stat().st_size)
            now = START + timedelta(seconds=first + every)
            session.compact(older_than=timedelta(seconds=compact_after), now=now)
            session.forget(older_than=timedelta(seconds=forget_after), now=now)
        elapsed = time.perf_counter() - started
    saves = cycles * 8 // 3 + 2 * cycles // every
    report(
        f"\n{cycles} unbatched cycles in {elapsed:.1f} s ({cycles / elapsed:.0f} cycles/s,"
        f" {saves / elapsed:.0f} saves/s); state.json at most {largest} bytes"
    )
    with acquire(store, HOST) as session:
        _check_answers(session, range(cycles), cycles - forget_after + 1)
        assert len(session.records()) == compact_after - 1
