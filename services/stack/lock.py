"""One ``opsctl up`` per directory: an exclusive ``flock`` on ``var/up.lock`` for its life.

Two stacks run from one directory would share its SQLite file, ``var/keys`` and
``var/stack.json``: the second overwrote the first's stack.json and removed it
when it stopped, and the operator's commands no longer found the running stack.
The kernel drops the lock when its holder exits, however it exits, so a killed
stack leaves nothing to clean up. The file stays when its stack stops: deleting
a lock file races with the next taker, who may lock a file no longer there. It
holds the holder's pid, read only while the lock is held.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from durable_ops.private_files import FILE_MODE, private_directory

LOCK_PATH = Path("var") / "up.lock"


class StackRunning(Exception):
    """Another ``opsctl up`` holds the lock."""

    def __init__(self, pid: int | None) -> None:
        who = f"pid {pid}" if pid is not None else "its pid not written yet"
        super().__init__(
            f"another opsctl up ({who}) runs from this directory, and two would share its"
            " database, keys and var/stack.json; stop that one first, or run this one from"
            " another directory"
        )
        self.pid = pid


def check_free(path: Path = LOCK_PATH) -> None:
    """Raise ``StackRunning`` if a stack holds ``path``; make no file either way."""
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return  # no stack ever ran here
    try:
        _lock_or_refuse(descriptor)
    finally:
        os.close(descriptor)  # releases the probe's lock too


def take(path: Path = LOCK_PATH) -> int:
    """Hold ``path`` (made 0600, in a private var/) until the descriptor returned is
    closed or this process exits; ``StackRunning`` when another stack holds it."""
    private_directory(path.parent)
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, FILE_MODE)
    try:
        _lock_or_refuse(descriptor)
        os.ftruncate(descriptor, 0)
        os.write(descriptor, f"{os.getpid()}\n".encode())
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


def _lock_or_refuse(descriptor: int) -> None:
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise StackRunning(_pid(descriptor)) from None


def _pid(descriptor: int) -> int | None:
    """The holder's pid; None while it has locked the file but not yet written it."""
    with contextlib.suppress(ValueError):
        return int(os.pread(descriptor, 32, 0).decode().strip())
    return None
