"""Reading and atomically replacing ``state.json``.

A save writes a unique private temporary file, syncs it, closes it, renames it
over ``state.json`` and syncs the directory, in that order. A failure anywhere
raises ``OSError`` and may leave either the old or the new snapshot in place:
the rename may already have happened, which is why the session poisons itself.
Temporary files left by a killed process are never read; only ``state.json`` is.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
from collections.abc import Sequence
from typing import Final

from durable_ops.hoststore.directory import check_private_file
from durable_ops.hoststore.errors import ReadFailed, SnapshotTooLarge, UnsafeFile
from durable_ops.hoststore.filesystem import FileSystem, write_all
from durable_ops.hoststore.snapshot import MAX_SNAPSHOT_BYTES

STATE_NAME: Final = "state.json"
TEMP_PATTERN: Final = re.compile(r"\.state\.json\.[0-9a-f]{16}\.tmp")


# Never follow a symlink, never wait in open() on a FIFO or a device. (getattr: the
# module still imports where a flag is missing; the store refuses such platforms.)
READ_FLAGS: Final[int] = (
    os.O_RDONLY
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_CLOEXEC", 0)
)


def temp_name() -> str:
    return f".{STATE_NAME}.{secrets.token_hex(8)}.tmp"


def read(dir_fd: int) -> bytes | None:
    """The bytes of ``state.json``, or ``None`` if there is none.

    ``O_NONBLOCK`` keeps the open itself from waiting on a FIFO or a device put
    in its place; ``fstat`` then refuses anything but a private regular file
    before a byte is read (``O_NONBLOCK`` changes nothing for a regular file).
    """
    try:
        fd = os.open(STATE_NAME, READ_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeFile(f"{STATE_NAME} is a symlink") from None
        raise ReadFailed(f"cannot open {STATE_NAME}: {exc.strerror}") from exc
    try:
        check_private_file(os.fstat(fd), STATE_NAME)
        return read_capped(fd)
    except OSError as exc:
        raise ReadFailed(f"cannot read {STATE_NAME}: {exc.strerror}") from exc
    finally:
        os.close(fd)


def read_capped(fd: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > MAX_SNAPSHOT_BYTES:
            raise SnapshotTooLarge(f"{STATE_NAME} is larger than {MAX_SNAPSHOT_BYTES} bytes")
        chunks.append(chunk)


def save(fs: FileSystem, dir_fd: int, parts: Sequence[bytes]) -> None:
    """Durably replace ``state.json`` with the concatenation of ``parts``."""
    name = temp_name()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = fs.open(name, flags, 0o600, dir_fd=dir_fd)
    renamed = False
    try:
        try:
            write_all(fs, fd, parts)
            fs.fsync(fd)
        finally:
            fs.close(fd)
        fs.rename(name, STATE_NAME, dir_fd=dir_fd)
        renamed = True
        fs.fsync(dir_fd)
    except OSError:
        if not renamed:
            # Our own unfinished file, not a remnant of another process: tidy it if we can.
            with contextlib.suppress(OSError):
                fs.unlink(name, dir_fd=dir_fd)
        raise
