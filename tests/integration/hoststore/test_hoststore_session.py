"""A session on a real directory: persistence, marker rules, remnants, capacity."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from durable_ops.hoststore import (
    ChecksumMismatch,
    ForbiddenTransition,
    HostMismatch,
    InvalidInput,
    PlanHashConflict,
    ReadFailed,
    Record,
    RevisionMismatch,
    SnapshotMissing,
    SnapshotTruncated,
    State,
    StoreFull,
    UnknownOperation,
    UnresolvedOperation,
    UnsafeFile,
    acquire,
    lockfile,
)
from durable_ops.hoststore.snapshot import (
    MAX_SNAPSHOT_BYTES,
    RECORD_GROWTH_RESERVE,
    Snapshot,
    encode,
)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    directory = tmp_path / "store"
    directory.mkdir()
    directory.chmod(0o700)
    return directory


class Ticking:
    def __init__(self) -> None:
        self.now = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


def test_the_full_lifecycle_persists_across_sessions(store: Path) -> None:
    clock = Ticking()
    with acquire(store, "runner-1", clock=clock) as session:
        record, created = session.begin("op-1", "hash-a")
        assert created
        assert isinstance(record, Record)
        assert (record.state, record.revision) == (State.QUEUED, 1)
        assert record.created_at == "2026-03-04T05:06:08.000000Z"
        claimed = session.advance("op-1", 1, State.RUNNING)
        assert (claimed.state, claimed.revision) == (State.RUNNING, 2)
        assert claimed.updated_at == "2026-03-04T05:06:09.000000Z"
        assert claimed.created_at == record.created_at
    with acquire(store, "runner-1", clock=clock) as session:
        assert session.get("op-1") == claimed
        assert session.unresolved() == claimed
        unknown = session.advance("op-1", 2, "unknown")
    with acquire(store, "runner-1", clock=clock) as session:
        assert session.get("op-1") == unknown
        done = session.advance("op-1", 3, State.SUCCEEDED)
        assert session.unresolved() is None
        assert session.begin("op-1", "hash-a") == (done, False)
        assert session.begin("op-2", "hash-b")[1]
        assert [r.id for r in session.records()] == ["op-1", "op-2"]


def test_rules_are_enforced_through_the_session(store: Path) -> None:
    with acquire(store, "runner-1") as session:
        session.begin("op-1", "hash-a")
        with pytest.raises(PlanHashConflict):
            session.begin("op-1", "hash-b")
        with pytest.raises(UnresolvedOperation):
            session.begin("op-2", "hash-a")
        with pytest.raises(RevisionMismatch):
            session.advance("op-1", 2, State.RUNNING)
        session.advance("op-1", 1, State.RUNNING)
        with pytest.raises(RevisionMismatch):
            session.advance("op-1", 1, State.RUNNING)
        with pytest.raises(ForbiddenTransition):
            session.advance("op-1", 2, State.RUNNING)
        with pytest.raises(UnknownOperation):
            session.get("op-2")
        with pytest.raises(UnknownOperation):
            session.advance("op-2", 1, State.RUNNING)
        assert not session.poisoned, "refusals by the rules do not poison"


@pytest.mark.parametrize(
    ("operation_id", "plan_hash", "revision", "state"),
    [
        ("", "h", 1, "running"),
        ("has space", "h", 1, "running"),
        ("x" * 129, "h", 1, "running"),
        ("op", "", 1, "running"),
        ("op", "h", 0, "running"),
        ("op", "h", True, "running"),
        ("op", "h", 1, "finished"),
    ],
)
def test_bad_arguments_are_refused(
    store: Path, operation_id: str, plan_hash: str, revision: int, state: str
) -> None:
    with acquire(store, "runner-1") as session:
        if operation_id == "op" and plan_hash == "h":
            session.begin(operation_id, plan_hash)
            with pytest.raises(InvalidInput):
                session.advance(operation_id, revision, state)
        else:
            with pytest.raises(InvalidInput):
                session.begin(operation_id, plan_hash)
        assert not session.poisoned


def test_a_bad_host_id_is_refused(store: Path) -> None:
    with pytest.raises(InvalidInput):
        acquire(store, "runner 1")
    assert os.listdir(store) == []


def test_get_returns_a_value(store: Path) -> None:
    with acquire(store, "runner-1") as session:
        session.begin("op-1", "hash-a")
        copy = session.get("op-1")
        with pytest.raises(dataclasses.FrozenInstanceError):
            copy.state = State.SUCCEEDED  # type: ignore[misc]
        session.advance("op-1", 1, State.RUNNING)
        assert copy.state is State.QUEUED, "a copy taken earlier does not change"


def test_another_host_id_is_refused(store: Path) -> None:
    acquire(store, "runner-1").close()
    with pytest.raises(HostMismatch):
        acquire(store, "runner-2")


def test_the_marker_follows_the_first_snapshot(store: Path) -> None:
    acquire(store, "runner-1").close()
    assert (store / "host.lock").read_bytes() == lockfile.MARKER
    assert (store / "state.json").exists()


def test_a_marked_store_without_snapshot_is_refused(store: Path) -> None:
    with acquire(store, "runner-1") as session:
        session.begin("op-1", "hash-a")
    (store / "state.json").unlink()
    with pytest.raises(SnapshotMissing):
        acquire(store, "runner-1")
    assert not (store / "state.json").exists(), "never restarted as a fresh store"


@pytest.mark.parametrize("content", [b"", lockfile.MARKER[:10]])
def test_a_valid_snapshot_without_marker_is_repaired(store: Path, content: bytes) -> None:
    with acquire(store, "runner-1") as session:
        session.begin("op-1", "hash-a")
    lock = store / "host.lock"
    inode = lock.stat().st_ino
    with open(lock, "r+b") as handle:  # in place, like a crash before the marker write
        handle.truncate(0)
        handle.write(content)
    with acquire(store, "runner-1") as session:
        assert session.get("op-1").state is State.QUEUED
    assert lock.read_bytes() == lockfile.MARKER
    assert lock.stat().st_ino == inode


def test_an_invalid_snapshot_without_marker_is_not_repaired(store: Path) -> None:
    acquire(store, "runner-1").close()
    (store / "host.lock").write_bytes(b"")
    data = (store / "state.json").read_bytes()
    (store / "state.json").write_bytes(data[:-1])
    with pytest.raises(SnapshotTruncated):
        acquire(store, "runner-1")
    assert (store / "host.lock").read_bytes() == b""


def test_a_changed_snapshot_is_refused(store: Path) -> None:
    with acquire(store, "runner-1") as session:
        session.begin("op-1", "hash-a")
    data = (store / "state.json").read_bytes()
    (store / "state.json").write_bytes(data.replace(b'"queued"', b'"running"'))
    with pytest.raises(ChecksumMismatch):
        acquire(store, "runner-1")


def _version_1_store(store: Path, version: int = 1) -> bytes:
    """A marked store whose state.json an earlier release wrote in an older format."""
    old = Snapshot(
        "runner-1",
        {
            "op-1": Record(
                "op-1",
                "hash-a",
                State.SUCCEEDED,
                3,
                "2026-01-02T03:04:05.000000Z",
                "2026-01-02T03:04:06.000000Z",
            ),
        },
    )
    data = encode(old, version=version)
    assert json.loads(data)["body"]["version"] == version
    (store / "state.json").write_bytes(data)
    (store / "state.json").chmod(0o600)
    (store / "host.lock").write_bytes(lockfile.MARKER)
    (store / "host.lock").chmod(0o600)
    return data


@pytest.mark.parametrize("version", [1, 2])
def test_an_older_store_is_read_and_its_next_save_writes_version_3(
    store: Path, version: int
) -> None:
    data = _version_1_store(store, version)
    with acquire(store, "runner-1") as session:
        assert session.get("op-1").state is State.SUCCEEDED
        assert session.begin("op-1", "hash-a")[1] is False
    assert (store / "state.json").read_bytes() == data, "reading alone rewrites nothing"

    with acquire(store, "runner-1") as session:
        session.begin("op-2", "hash-b")
    document = json.loads((store / "state.json").read_bytes())
    assert document["body"]["version"] == 3
    assert document["body"]["tombstones"] == {}
    assert sorted(document["body"]["operations"]) == ["op-1", "op-2"]
    with acquire(store, "runner-1") as session:
        assert session.get("op-1").state is State.SUCCEEDED
        assert session.get("op-2").state is State.QUEUED


def test_a_changed_version_1_store_is_refused(store: Path) -> None:
    data = _version_1_store(store)
    (store / "state.json").write_bytes(data.replace(b'"revision":3', b'"revision":4'))
    with pytest.raises(ChecksumMismatch):
        acquire(store, "runner-1")


def test_temp_remnants_are_ignored_and_left_alone(store: Path) -> None:
    with acquire(store, "runner-1") as session:
        session.begin("op-1", "hash-a")
    newer = Snapshot(
        "runner-1",
        {"op-1": Record("op-1", "hash-a", State.SUCCEEDED, 3, "x", "x")},
    )
    remnants = {
        ".state.json.0123456789abcdef.tmp": b'{"body":',
        ".state.json.fedcba9876543210.tmp": encode(newer),
    }
    for name, content in remnants.items():
        (store / name).write_bytes(content)
        (store / name).chmod(0o600)
    with acquire(store, "runner-1") as session:
        assert session.get("op-1").state is State.QUEUED
        session.advance("op-1", 1, State.RUNNING)
    for name, content in remnants.items():
        assert (store / name).read_bytes() == content
    assert not [n for n in os.listdir(store) if n.endswith(".tmp") and n not in remnants]


def _store_near_the_cap(store: Path, headroom: int) -> None:
    """Write a valid, marked store whose next begin of 'op-new'/'hash' leaves ``headroom``."""
    stamp = "2026-01-01T00:00:00.000000Z"

    def filled(count: int, pad: int) -> Snapshot:
        records = {}
        for index in range(count):
            grow = min(pad, 64)
            pad -= grow
            key = f"{index:0120d}"
            records[key] = Record(key, "p" * (64 + grow), State.SUCCEEDED, 4, stamp, stamp)
        assert pad == 0
        return Snapshot("runner-1", records)

    probe = {"op-new": Record("op-new", "hash", State.QUEUED, 1, stamp, stamp)}
    one = len(encode(filled(1, 0)))
    two = len(encode(filled(2, 0)))
    per_record = two - one
    with_new = len(encode(Snapshot("runner-1", {**filled(1, 0).records, **probe}))) - one
    target = MAX_SNAPSHOT_BYTES - headroom - with_new
    count = 1 + (target - one) // per_record
    pad = target - (one + (count - 1) * per_record)
    current = filled(count, pad)
    assert len(encode(Snapshot("runner-1", {**current.records, **probe}))) == (
        MAX_SNAPSHOT_BYTES - headroom
    )
    (store / "state.json").write_bytes(encode(current))
    (store / "state.json").chmod(0o600)
    (store / "host.lock").write_bytes(lockfile.MARKER)
    (store / "host.lock").chmod(0o600)


class FrozenClock:
    def __call__(self) -> datetime:
        return datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.slow
def test_at_the_cap_writes_fail_closed_and_reads_keep_working(store: Path) -> None:
    _store_near_the_cap(store, headroom=RECORD_GROWTH_RESERVE - 1)
    before = (store / "state.json").read_bytes()
    with acquire(store, "runner-1", clock=FrozenClock()) as session:
        with pytest.raises(StoreFull):
            session.begin("op-new", "hash")
        assert not session.poisoned
        assert session.get(f"{0:0120d}").state is State.SUCCEEDED
        assert session.unresolved() is None
    assert (store / "state.json").read_bytes() == before


@pytest.mark.slow
def test_a_begin_leaving_the_reserve_is_admitted_and_can_finish(store: Path) -> None:
    _store_near_the_cap(store, headroom=RECORD_GROWTH_RESERVE)
    with acquire(store, "runner-1", clock=FrozenClock()) as session:
        assert session.begin("op-new", "hash")[1]
        session.advance("op-new", 1, State.RUNNING)
        session.advance("op-new", 2, State.NEEDS_ATTENTION)
        session.advance("op-new", 3, State.FAILED_RECOVERED)
        with pytest.raises(StoreFull):
            session.begin("op-newer", "hash")
        assert not session.poisoned
    assert os.path.getsize(store / "state.json") <= MAX_SNAPSHOT_BYTES
    with acquire(store, "runner-1") as session:
        assert session.get("op-new").state is State.FAILED_RECOVERED
    document = json.loads((store / "state.json").read_bytes())
    assert document["body"]["operations"]["op-new"]["revision"] == 4


@pytest.mark.parametrize("call", ["read", "pread"])
def test_read_errors_refuse_the_acquire(
    store: Path, call: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    acquire(store, "runner-1").close()

    def failing(*args: object) -> bytes:
        raise OSError(errno.EIO, "injected")

    monkeypatch.setattr(os, call, failing)
    with pytest.raises(ReadFailed):
        acquire(store, "runner-1")
    monkeypatch.undo()
    acquire(store, "runner-1").close()


def test_a_directory_in_place_of_the_snapshot_is_refused(store: Path) -> None:
    (store / "state.json").mkdir()
    with pytest.raises(UnsafeFile, match="regular file"):
        acquire(store, "runner-1")
