"""The store lock across processes: exclusion, release on SIGKILL, replacement detection."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from durable_ops.hoststore import (
    HostLocked,
    LockReplaced,
    SessionClosed,
    SessionPoisoned,
    State,
    acquire,
)
from durable_ops.hoststore.filesystem import FileSystem

ROOT = Path(__file__).resolve().parents[3]

HOLDER = """
import sys
from durable_ops.hoststore import HostStoreError, acquire
session = acquire(sys.argv[1], "runner-1")
print("held", flush=True)
for command in sys.stdin:
    if command.strip() == "begin":
        try:
            session.begin("op-after", "hash")
            print("ok", flush=True)
        except HostStoreError as exc:
            print(exc.code, "poisoned" if session.poisoned else "healthy", flush=True)
    elif command.strip() == "close":
        session.close()
        print("closed", flush=True)
"""

ATTEMPT = """
import sys
from durable_ops.hoststore import HostStoreError, acquire
try:
    acquire(sys.argv[1], "runner-1").close()
    print("acquired")
except HostStoreError as exc:
    print(exc.code)
"""


@pytest.fixture
def store(tmp_path: Path) -> Path:
    directory = tmp_path / "store"
    directory.mkdir()
    directory.chmod(0o700)
    return directory


def _python(code: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )


@pytest.fixture
def holder(store: Path) -> Iterator[subprocess.Popen[str]]:
    process = _python(HOLDER, str(store))
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "held"
    yield process
    if process.poll() is None:
        process.kill()
    process.wait(timeout=10)
    for stream in (process.stdin, process.stdout):
        if stream is not None:
            stream.close()


def _attempt_from_another_process(path: Path | str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", ATTEMPT, str(path)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        timeout=60,
        check=True,
    )
    return result.stdout.strip()


def test_a_second_acquire_fails_at_once_while_another_process_holds(
    store: Path, holder: subprocess.Popen[str]
) -> None:
    # The holder keeps its lock until the test ends: an acquire that waited for it would
    # still be waiting when the guard below gives up.
    refused: list[BaseException] = []

    def attempt() -> None:
        try:
            acquire(store, "runner-1")
        except HostLocked as exc:
            refused.append(exc)

    trying = threading.Thread(target=attempt, daemon=True)
    trying.start()
    trying.join(timeout=60)
    assert not trying.is_alive(), "a held lock must be refused, not waited for"
    assert len(refused) == 1
    assert _attempt_from_another_process(store) == "host_locked"
    assert _attempt_from_another_process(f"{store}/../{store.name}/.") == "host_locked"


def test_the_lock_is_free_after_the_holder_is_killed(
    store: Path, holder: subprocess.Popen[str]
) -> None:
    with pytest.raises(HostLocked):
        acquire(store, "runner-1")
    holder.send_signal(signal.SIGKILL)
    assert holder.wait(timeout=10) == -signal.SIGKILL
    with acquire(store, "runner-1") as session:
        assert session.records() == ()


def test_a_second_acquire_in_the_same_process_fails(store: Path) -> None:
    with acquire(store, "runner-1"):
        with pytest.raises(HostLocked):
            acquire(store, "runner-1")
        assert _attempt_from_another_process(store) == "host_locked"
    assert _attempt_from_another_process(store) == "acquired"


def _replace_lock(store: Path) -> None:
    fresh = store / "host.lock.new"
    fresh.write_bytes((store / "host.lock").read_bytes())
    fresh.chmod(0o600)
    os.replace(fresh, store / "host.lock")


def _delete_lock(store: Path) -> None:
    (store / "host.lock").unlink()


def _tell(holder: subprocess.Popen[str], command: str) -> list[str]:
    assert holder.stdin is not None
    assert holder.stdout is not None
    holder.stdin.write(f"{command}\n")
    holder.stdin.flush()
    return holder.stdout.readline().split()


@pytest.mark.parametrize("change", [_delete_lock, _replace_lock], ids=["deleted", "replaced"])
def test_a_changed_host_lock_neither_admits_a_second_session_nor_lets_the_holder_write(
    store: Path, holder: subprocess.Popen[str], change: Callable[[Path], None]
) -> None:
    change(store)
    lock_after_change = sorted(os.listdir(store))
    assert _attempt_from_another_process(store) == "host_locked"
    with pytest.raises(HostLocked):
        acquire(store, "runner-1")
    assert sorted(os.listdir(store)) == lock_after_change, "a refused acquire touches no file"
    assert _tell(holder, "begin") == ["lock_replaced", "poisoned"]
    assert _attempt_from_another_process(store) == "host_locked", "held until closed"
    assert _tell(holder, "close") == ["closed"]
    with acquire(store, "runner-1") as session:
        assert session.records() == (), "the refused begin must not have been written"


def test_a_lock_on_host_lock_alone_still_refuses(store: Path) -> None:
    """What a worker of an older version holds: the flock on host.lock, not the directory's."""
    acquire(store, "runner-1").close()
    older_worker = os.open(store / "host.lock", os.O_RDWR | os.O_CLOEXEC)
    try:
        fcntl.flock(older_worker, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(HostLocked):
            acquire(store, "runner-1")
    finally:
        os.close(older_worker)
    acquire(store, "runner-1").close()


def test_host_lock_replaced_between_its_open_and_its_flock_refuses_the_acquire(
    store: Path,
) -> None:
    """The lock taken must be on the file ``host.lock`` names, not on an inode swapped out."""

    class SwapAfterOpen(FileSystem):
        def open(
            self, name: str, flags: int, mode: int = 0o600, *, dir_fd: int | None = None
        ) -> int:
            fd = super().open(name, flags, mode, dir_fd=dir_fd)
            if name == "host.lock":
                _replace_lock(store)
            return fd

    with pytest.raises(LockReplaced, match="replaced"):
        acquire(store, "runner-1", filesystem=SwapAfterOpen())
    with acquire(store, "runner-1") as session:
        assert session.records() == ()


def test_replacing_host_lock_poisons_the_session(store: Path) -> None:
    session = acquire(store, "runner-1")
    record, _ = session.begin("op-1", "hash")
    _replace_lock(store)
    with pytest.raises(LockReplaced):
        session.advance("op-1", record.revision, State.RUNNING)
    assert session.poisoned
    with pytest.raises(SessionPoisoned):
        session.get("op-1")
    with pytest.raises(SessionPoisoned):
        session.begin("op-1", "hash")
    session.close()
    with acquire(store, "runner-1") as reopened:
        assert reopened.get("op-1").state is State.QUEUED


def test_deleting_host_lock_poisons_the_session(store: Path) -> None:
    session = acquire(store, "runner-1")
    (store / "host.lock").unlink()
    with pytest.raises(LockReplaced, match="gone"):
        session.begin("op-1", "hash")
    assert session.poisoned
    session.close()


def test_replacing_the_directory_poisons_the_session(store: Path, tmp_path: Path) -> None:
    session = acquire(store, "runner-1")
    store.rename(tmp_path / "old-store")
    store.mkdir(mode=0o700)
    with pytest.raises(LockReplaced, match="directory"):
        session.begin("op-1", "hash")
    assert session.poisoned
    session.close()
    assert os.listdir(store) == []


def test_host_lock_keeps_its_inode_and_bytes_across_sessions(store: Path) -> None:
    with acquire(store, "runner-1") as session:
        session.begin("op-1", "hash")
    first = (store / "host.lock").stat()
    content = (store / "host.lock").read_bytes()
    for _ in range(3):
        with acquire(store, "runner-1") as session:
            record = session.get("op-1")
            if record.state is State.QUEUED:
                session.advance("op-1", record.revision, State.CANCELLED)
        again = (store / "host.lock").stat()
        assert (again.st_ino, again.st_dev) == (first.st_ino, first.st_dev)
        assert (store / "host.lock").read_bytes() == content


def test_a_closed_session_refuses_every_call(store: Path) -> None:
    session = acquire(store, "runner-1")
    session.begin("op-1", "hash")
    session.close()
    session.close()  # idempotent
    assert session.closed
    calls = [
        lambda: session.begin("op-1", "hash"),
        lambda: session.advance("op-1", 1, State.RUNNING),
        lambda: session.get("op-1"),
        session.records,
        session.unresolved,
    ]
    for call in calls:
        with pytest.raises(SessionClosed):
            call()
