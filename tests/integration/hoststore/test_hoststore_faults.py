"""Fault injection on the save path, and the order of its durable steps.

An ``OSError`` is raised at each call of the save path (open temp, write, fsync,
close, rename, directory fsync, and at initialization the marker write and its
fsync), once or persistently: the session must be poisoned and the directory must
reopen to a valid old or new state. A recording file system pins the order
fsync(temp) < rename < fsync(directory) < marker write < fsync(host.lock).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

import pytest

from durable_ops.hoststore import (
    SaveFailed,
    SessionPoisoned,
    State,
    Tombstone,
    acquire,
    lockfile,
    statefile,
)
from durable_ops.hoststore.filesystem import FileSystem

SAVE_STEPS = ["open_temp", "write", "fsync_temp", "close_temp", "rename", "fsync_directory"]
MARKER_STEPS = ["pwrite_marker", "fsync_lock"]


class RecordingFileSystem(FileSystem):
    """Labels every call by what it touches, records it, and fails where told."""

    def __init__(self) -> None:
        self.kinds: dict[int, str] = {}
        self.calls: list[str] = []
        self.fail_at: str | None = None
        self.fail_errno = errno.EIO
        self.persistent = False
        self.failures = 0

    def arm(self, step: str, code: int, *, persistent: bool) -> None:
        self.fail_at, self.fail_errno, self.persistent = step, code, persistent

    def _step(self, label: str) -> bool:
        self.calls.append(label)
        if label != self.fail_at or (self.failures and not self.persistent):
            return False
        self.failures += 1
        return True

    def _fail(self) -> OSError:
        return OSError(self.fail_errno, os.strerror(self.fail_errno))

    def open(self, name: str, flags: int, mode: int = 0o600, *, dir_fd: int | None = None) -> int:
        if flags & os.O_DIRECTORY:
            kind = "directory"
        elif name == lockfile.LOCK_NAME:
            kind = "lock"
        elif statefile.TEMP_PATTERN.fullmatch(name):
            kind = "temp"
        else:
            kind = "other"
        if self._step(f"open_{kind}"):
            raise self._fail()
        fd = super().open(name, flags, mode, dir_fd=dir_fd)
        self.kinds[fd] = kind
        return fd

    def writev(self, fd: int, buffers: Sequence[bytes | memoryview]) -> int:
        if self._step("write"):
            first = buffers[0]
            super().writev(fd, [first[: len(first) // 2]])  # a short write, then the error
            raise self._fail()
        return super().writev(fd, buffers)

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        if self._step("pwrite_marker"):
            raise self._fail()
        return super().pwrite(fd, data, offset)

    def fsync(self, fd: int) -> None:
        if self._step(f"fsync_{self.kinds.get(fd, 'other')}"):
            raise self._fail()
        super().fsync(fd)

    def close(self, fd: int) -> None:
        kind = self.kinds.pop(fd, "other")
        if self._step(f"close_{kind}"):
            super().close(fd)  # Linux frees the descriptor even when close reports an error
            raise self._fail()
        super().close(fd)

    def rename(self, source: str, target: str, *, dir_fd: int) -> None:
        if self._step("rename"):
            raise self._fail()
        super().rename(source, target, dir_fd=dir_fd)

    def unlink(self, name: str, *, dir_fd: int) -> None:
        self.calls.append("unlink")
        super().unlink(name, dir_fd=dir_fd)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    directory = tmp_path / "store"
    directory.mkdir()
    directory.chmod(0o700)
    return directory


def _temp_files(store: Path) -> list[str]:
    return [name for name in os.listdir(store) if statefile.TEMP_PATTERN.fullmatch(name)]


@pytest.mark.parametrize("persistent", [False, True], ids=["once", "persistent"])
@pytest.mark.parametrize("code", [errno.EIO, errno.ENOSPC], ids=["EIO", "ENOSPC"])
@pytest.mark.parametrize("step", SAVE_STEPS)
def test_a_failing_save_poisons_and_the_store_reopens_old_or_new(
    store: Path, step: str, code: int, persistent: bool
) -> None:
    fs = RecordingFileSystem()
    session = acquire(store, "runner-1", filesystem=fs)
    session.begin("op-1", "hash")
    session.advance("op-1", 1, State.RUNNING)
    fs.arm(step, code, persistent=persistent)

    with pytest.raises(SaveFailed) as raised:
        session.advance("op-1", 2, State.SUCCEEDED)
    assert raised.value.errno == code
    assert fs.failures == 1
    assert session.poisoned
    for call in (
        lambda: session.get("op-1"),
        lambda: session.advance("op-1", 2, State.SUCCEEDED),
        lambda: session.begin("op-1", "hash"),
        session.records,
    ):
        with pytest.raises(SessionPoisoned):
            call()
    assert fs.failures == 1, "a poisoned session must not try to write again"
    session.close()

    with acquire(store, "runner-1") as reopened:
        record = reopened.get("op-1")
        if step == "fsync_directory":
            assert (record.state, record.revision) == (State.SUCCEEDED, 3)
        else:
            assert (record.state, record.revision) == (State.RUNNING, 2)
        if record.state is State.RUNNING:
            reopened.advance("op-1", record.revision, State.FAILED_RECOVERED)
    assert _temp_files(store) == [], "our own unfinished temp file is removed"


def test_a_rename_that_happened_but_reported_an_error_reopens_new(store: Path) -> None:
    class LateRenameError(RecordingFileSystem):
        def rename(self, source: str, target: str, *, dir_fd: int) -> None:
            FileSystem.rename(self, source, target, dir_fd=dir_fd)
            if self.fail_at == "rename":
                raise OSError(errno.EIO, "reported after the fact")

    fs = LateRenameError()
    session = acquire(store, "runner-1", filesystem=fs)
    session.begin("op-1", "hash")
    fs.fail_at = "rename"
    with pytest.raises(SaveFailed):
        session.advance("op-1", 1, State.CANCELLED)
    assert session.poisoned
    session.close()
    with acquire(store, "runner-1") as reopened:
        assert reopened.get("op-1").state is State.CANCELLED


@pytest.mark.parametrize("persistent", [False, True], ids=["once", "persistent"])
@pytest.mark.parametrize("code", [errno.EIO, errno.ENOSPC], ids=["EIO", "ENOSPC"])
@pytest.mark.parametrize("step", SAVE_STEPS + MARKER_STEPS)
def test_a_failing_initialization_leaves_a_store_that_reopens(
    store: Path, step: str, code: int, persistent: bool
) -> None:
    fs = RecordingFileSystem()
    fs.arm(step, code, persistent=persistent)
    with pytest.raises(SaveFailed) as raised:
        acquire(store, "runner-1", filesystem=fs)
    assert raised.value.errno == code
    marker = (store / "host.lock").read_bytes()
    if step != "fsync_lock":
        assert marker == b"", "the marker must never precede a durable snapshot"
    with acquire(store, "runner-1") as session:
        assert session.records() == ()
        session.begin("op-1", "hash")
    assert (store / "host.lock").read_bytes() == lockfile.MARKER


def test_a_failing_marker_repair_refuses_the_acquire_and_is_retried(store: Path) -> None:
    acquire(store, "runner-1").close()
    (store / "host.lock").write_bytes(b"")
    fs = RecordingFileSystem()
    fs.arm("pwrite_marker", errno.EIO, persistent=False)
    with pytest.raises(SaveFailed):
        acquire(store, "runner-1", filesystem=fs)
    acquire(store, "runner-1").close()
    assert (store / "host.lock").read_bytes() == lockfile.MARKER


def _positions(calls: list[str], *labels: str) -> list[int]:
    return [calls.index(label) for label in labels]


def test_durable_steps_happen_in_order(store: Path) -> None:
    fs = RecordingFileSystem()
    session = acquire(store, "runner-1", filesystem=fs)
    initialization = list(fs.calls)
    order = ["write", "fsync_temp", "close_temp", "rename", "fsync_directory"]
    order += ["pwrite_marker", "fsync_lock"]
    positions = _positions(initialization, *order)
    assert positions == sorted(positions), initialization
    assert initialization.count("fsync_temp") == 1
    assert initialization.count("fsync_directory") == 1

    fs.calls.clear()
    session.begin("op-1", "hash")
    mutation = list(fs.calls)
    positions = _positions(mutation, "open_temp", "write", "fsync_temp", "close_temp")
    positions += _positions(mutation, "rename", "fsync_directory")
    assert positions == sorted(positions), mutation
    assert "pwrite_marker" not in mutation, "the marker is written once, at initialization"
    session.close()

    fs.calls.clear()
    with acquire(store, "runner-1", filesystem=fs):
        pass
    assert "pwrite_marker" not in fs.calls, "a marked store is not re-marked"
    assert "rename" not in fs.calls, "opening an initialized store writes nothing"


@pytest.mark.parametrize("step", SAVE_STEPS)
def test_a_failing_compaction_poisons_and_the_store_reopens_old_or_new(
    store: Path, step: str
) -> None:
    fs = RecordingFileSystem()
    session = acquire(store, "runner-1", filesystem=fs)
    session.begin("op-1", "hash")
    session.advance("op-1", 1, State.CANCELLED)
    fs.arm(step, errno.EIO, persistent=False)
    with pytest.raises(SaveFailed):
        session.compact(older_than=timedelta(0))
    assert session.poisoned
    with pytest.raises(SessionPoisoned):
        session.compact(older_than=timedelta(0))
    session.close()

    with acquire(store, "runner-1") as reopened:
        found = reopened.get("op-1")
        assert (found.state, found.revision) == (State.CANCELLED, 2)
        compacted = isinstance(found, Tombstone)
        assert compacted == (step == "fsync_directory"), "old or new, never anything else"
        assert reopened.begin("op-1", "hash") == (found, False)
    assert _temp_files(store) == []


def test_compaction_saves_in_the_same_order(store: Path) -> None:
    fs = RecordingFileSystem()
    with acquire(store, "runner-1", filesystem=fs) as session:
        session.begin("op-1", "hash")
        session.advance("op-1", 1, State.CANCELLED)
        fs.calls.clear()
        assert session.compact(older_than=timedelta(0)) == 1
    steps = ["open_temp", "write", "fsync_temp", "close_temp", "rename", "fsync_directory"]
    assert [call for call in fs.calls if call in steps] == steps
