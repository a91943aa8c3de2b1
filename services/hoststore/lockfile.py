"""The store's exclusive lock, and ``host.lock`` with its initialization marker.

A session takes two non-blocking exclusive ``flock``s, first on the store
directory it holds open, then on ``host.lock`` (``flock``, not ``lockf``: it
belongs to the open file description, so a second acquire in the same process
is refused too, and closing an unrelated descriptor of the file does not drop it).

The directory's lock is what keeps the store exclusive. A lock on a file is
only as good as the file's name: once ``host.lock`` is deleted or replaced
behind its holder, the next acquire opens (or creates) another inode, locks it
and runs beside the holder, and the holder only finds out at its next write.
Nothing that happens to the names inside the directory moves the directory's
lock, so while a session holds it every other acquire is refused before it
touches a file. (Renaming the directory away and making another in its place
gives a new, empty store; the holder refuses its next write, as below.)

``host.lock`` keeps its own lock so that a worker of an older version, which
locks only that file, and this one exclude each other during an upgrade; and it
carries the marker. Its inode is that lock's identity, so the file is never
deleted, replaced or truncated here; the marker is written in place at offset 0
and synced. Before each write the session still checks that ``host.lock`` names
the file it locked (``check_held``) and poisons itself if not: the marker went
with the old file, and an older worker would take the new one.
"""

from __future__ import annotations

import errno
import os
from typing import Final

from durable_ops.hoststore.directory import check_private_file, identity, unwritable
from durable_ops.hoststore.errors import (
    HostLocked,
    LockFileInvalid,
    LockReplaced,
    ReadFailed,
    UnsafeFile,
)
from durable_ops.hoststore.filesystem import FileSystem

LOCK_NAME: Final = "host.lock"
MARKER: Final = b"durable-ops host-store initialized v1\n"


def open_and_lock(fs: FileSystem, dir_fd: int, directory: str) -> int:
    """Lock the directory, then open (creating if needed) and lock ``host.lock``.

    Refuses at once if either is held. The directory's lock lasts as long as
    ``dir_fd`` stays open, so closing ``dir_fd`` releases it, on failure too.
    """
    _lock_or_refuse(dir_fd, directory)
    # O_NONBLOCK: a FIFO or a device in its place never makes the open wait; fstat refuses it.
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = fs.open(LOCK_NAME, flags, 0o600, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeFile(f"{LOCK_NAME} in {directory} is a symlink") from None
        # A read-only file system, say: the directory is what to fix, not the file.
        refused = unwritable(exc, os.path.join(directory, LOCK_NAME))
        if refused is not None:
            raise refused from exc
        raise UnsafeFile(f"cannot open {LOCK_NAME} in {directory}: {exc.strerror}") from exc
    try:
        check_private_file(os.fstat(fd), LOCK_NAME)
        _lock_or_refuse(fd, directory)
        # Someone may have swapped the file between our open and our flock.
        check_held(dir_fd, fd)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _lock_or_refuse(fd: int, directory: str) -> None:
    import fcntl  # Linux only; importing it at module level would break import on Windows

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise HostLocked(f"the host store in {directory} is held by another session") from None


def held_elsewhere(directory: str) -> bool:
    """Whether a session holds the store in ``directory`` now, for a start that would
    otherwise learn it only from its worker's refusals (``opsctl up``). Asked with a shared
    lock taken and let go at once: a worker acquiring in that instant is refused, and takes
    it on its next start. False when there is no directory to ask."""
    import fcntl

    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return False  # none yet, or unreadable: the worker's own start says what is wrong
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # and the shared lock with it
    return False


def check_held(dir_fd: int, lock_fd: int, held: tuple[int, int] | None = None) -> None:
    """Refuse if ``host.lock`` in the directory is no longer the file we hold locked.

    ``held`` is ``identity(lock_fd)`` if the caller already knows it.
    """
    try:
        current = os.stat(LOCK_NAME, dir_fd=dir_fd, follow_symlinks=False)
    except OSError as exc:
        raise LockReplaced(f"{LOCK_NAME} is gone: {exc.strerror}") from exc
    if (current.st_dev, current.st_ino) != (held or identity(lock_fd)):
        raise LockReplaced(f"{LOCK_NAME} was replaced behind this session")


def is_marked(lock_fd: int) -> bool:
    try:
        content = os.pread(lock_fd, len(MARKER) + 1, 0)
    except OSError as exc:
        raise ReadFailed(f"cannot read {LOCK_NAME}: {exc.strerror}") from exc
    return parse_marker(content)


def parse_marker(content: bytes) -> bool:
    """True if marked, False if empty or a torn marker write; foreign bytes are refused."""
    if content == MARKER:
        return True
    if MARKER.startswith(content):
        return False
    raise LockFileInvalid(f"{LOCK_NAME} holds unexpected bytes; it is not a host-store lock")


def write_marker(fs: FileSystem, lock_fd: int) -> None:
    """Write the marker in place and sync it; raises ``OSError`` on failure."""
    written = 0
    while written < len(MARKER):
        count = fs.pwrite(lock_fd, MARKER[written:], written)
        if count <= 0:
            raise OSError(errno.EIO, f"pwrite returned {count}")
        written += count
    fs.fsync(lock_fd)
