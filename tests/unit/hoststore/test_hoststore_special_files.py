"""Special files in place of host.lock or state.json are refused at once, never waited on.

Issue 20, item 4. Real files in ``tmp_path``. A FIFO that nobody writes makes a
blocking ``open`` wait forever, so every call that meets one runs in a daemon
thread joined with a timeout: a regression fails the test instead of hanging
the suite (the FIFO is then opened for writing, which frees the thread).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from durable_ops.hoststore import SnapshotTooLarge, UnsafeFile, acquire, show, statefile
from durable_ops.hoststore.directory import open_directory
from durable_ops.hoststore.filesystem import FileSystem
from durable_ops.hoststore.snapshot import MAX_SNAPSHOT_BYTES

HANG_GUARD_S = 5.0


@dataclass
class Outcome:
    finished: bool
    value: object = None
    error: BaseException | None = field(default=None)


def _bounded(call: Callable[[], object], fifo: Path) -> Outcome:
    """Run ``call`` in a thread; if it is still blocked after the guard, unblock it and say so."""
    result: dict[str, object] = {}

    def run() -> None:
        try:
            result["value"] = call()
        except BaseException as exc:  # reported to the test, not lost in the thread
            result["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(HANG_GUARD_S)
    finished = not thread.is_alive()
    if not finished:
        # A writer lets a reader's blocking open return; the thread then ends.
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(HANG_GUARD_S)
    error = result.get("error")
    assert error is None or isinstance(error, BaseException)
    return Outcome(finished, result.get("value"), error)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    directory = tmp_path / "store"
    directory.mkdir()
    directory.chmod(0o700)
    with acquire(directory, "runner-1") as session:
        session.begin("op-1", "0123456789abcdef0123")
    return directory


def _fifo_in_place_of(store: Path, name: str) -> Path:
    path = store / name
    path.unlink()
    os.mkfifo(path, 0o600)
    return path


def _show(store: Path) -> tuple[int, dict[str, object]]:
    out = io.StringIO()
    code = show(store, as_json=True, out=out)
    document = json.loads(out.getvalue())
    assert isinstance(document, dict)
    return code, document


def _error_code(document: dict[str, object]) -> object:
    error = document["error"]
    assert isinstance(error, dict)
    return error["code"]


# ---- the session (what the AI worker does at start) --------------------------------------------


@pytest.mark.parametrize("name", ["state.json", "host.lock"])
def test_acquire_refuses_a_fifo_at_once(store: Path, name: str) -> None:
    fifo = _fifo_in_place_of(store, name)
    outcome = _bounded(lambda: acquire(store, "runner-1").close(), fifo)
    assert outcome.finished, f"acquire blocked on a FIFO in place of {name}"
    assert isinstance(outcome.error, UnsafeFile), outcome.error
    assert "regular file" in str(outcome.error)
    assert outcome.error.code == "unsafe_file"


def test_reading_the_snapshot_refuses_a_fifo_at_once(store: Path) -> None:
    fifo = _fifo_in_place_of(store, "state.json")
    dir_fd = open_directory(FileSystem(), str(store))
    try:
        outcome = _bounded(lambda: statefile.read(dir_fd), fifo)
    finally:
        os.close(dir_fd)
    assert outcome.finished, "statefile.read blocked on a FIFO"
    assert isinstance(outcome.error, UnsafeFile), outcome.error


def test_reading_the_snapshot_stops_at_the_cap(store: Path) -> None:
    """A regular file far above the cap is refused once the cap is passed, not read whole."""
    with open(store / "state.json", "r+b") as handle:
        handle.truncate(MAX_SNAPSHOT_BYTES + (1 << 22))  # sparse: no 20 MiB written
    dir_fd = open_directory(FileSystem(), str(store))
    try:
        with pytest.raises(SnapshotTooLarge, match=r"state\.json is larger than"):
            statefile.read(dir_fd)
    finally:
        os.close(dir_fd)


def test_the_read_flags_never_follow_and_never_wait() -> None:
    assert statefile.READ_FLAGS & os.O_NOFOLLOW
    assert statefile.READ_FLAGS & os.O_NONBLOCK
    assert statefile.READ_FLAGS & os.O_ACCMODE == os.O_RDONLY


# ---- the read-only view (opsctl host-store show) ------------------------------------------------


@pytest.mark.parametrize("name", ["state.json", "host.lock"])
def test_show_reports_a_fifo_at_once(store: Path, name: str) -> None:
    fifo = _fifo_in_place_of(store, name)
    outcome = _bounded(lambda: _show(store), fifo)
    assert outcome.finished, f"show blocked on a FIFO in place of {name}"
    assert outcome.error is None, outcome.error
    assert isinstance(outcome.value, tuple)
    code, document = outcome.value
    assert (code, document["ok"], _error_code(document)) == (1, False, "unsafe_file")


@pytest.mark.parametrize("name", ["state.json", "host.lock"])
@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660], ids=lambda mode: f"{mode:04o}")
def test_show_reports_a_mode_the_worker_would_refuse(store: Path, name: str, mode: int) -> None:
    (store / name).chmod(mode)
    with pytest.raises(UnsafeFile, match="mode"):
        acquire(store, "runner-1")  # what the worker does with it
    code, document = _show(store)
    assert (code, document["ok"], _error_code(document)) == (1, False, "unsafe_file")
    error = document["error"]
    assert isinstance(error, dict)
    assert f"{mode:04o}" in str(error["message"])


def test_show_accepts_the_mode_the_worker_accepts(store: Path) -> None:
    (store / "state.json").chmod(0o400)  # read-only for the owner: still private
    code, document = _show(store)
    assert (code, document["ok"]) == (0, True)
    assert document["warnings"] == []


def test_show_refuses_a_symlinked_snapshot_as_an_unsafe_file(store: Path, tmp_path: Path) -> None:
    moved = tmp_path / "elsewhere.json"
    (store / "state.json").rename(moved)
    (store / "state.json").symlink_to(moved)
    code, document = _show(store)
    assert (code, _error_code(document)) == (1, "unsafe_file")


def test_show_refuses_a_directory_in_place_of_the_snapshot(store: Path) -> None:
    (store / "state.json").unlink()
    (store / "state.json").mkdir()
    code, document = _show(store)
    assert (code, _error_code(document)) == (1, "unsafe_file")
