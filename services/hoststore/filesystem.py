"""The operating-system calls the store makes, gathered in one replaceable object.

Every open, write, sync and rename the store performs goes through a
``FileSystem``, so tests can inject failures at any single call or record the
order of calls. The default instance is a thin pass-through to ``os``.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence


def _iov_max() -> int:
    # writev takes at most IOV_MAX buffers per call (1024 on Linux).
    try:
        return max(1, min(os.sysconf("SC_IOV_MAX"), 1024))
    except (AttributeError, ValueError, OSError):
        return 16


IOV_MAX = _iov_max()


class FileSystem:
    def open(self, name: str, flags: int, mode: int = 0o600, *, dir_fd: int | None = None) -> int:
        return os.open(name, flags, mode, dir_fd=dir_fd)

    def writev(self, fd: int, buffers: Sequence[bytes | memoryview]) -> int:
        """Write ``buffers`` (at most ``IOV_MAX``) in order; may write fewer bytes."""
        return os.writev(fd, buffers)

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        return os.pwrite(fd, data, offset)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def close(self, fd: int) -> None:
        os.close(fd)

    def rename(self, source: str, target: str, *, dir_fd: int) -> None:
        os.rename(source, target, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)

    def unlink(self, name: str, *, dir_fd: int) -> None:
        os.unlink(name, dir_fd=dir_fd)


def write_all(fs: FileSystem, fd: int, parts: Sequence[bytes]) -> None:
    """Write ``parts`` in order, as if joined, in as few ``writev`` calls as it takes."""
    pending: list[bytes | memoryview] = list(filter(None, parts))
    start = 0
    while start < len(pending):
        batch = pending[start : start + IOV_MAX]
        written = fs.writev(fd, batch)
        if written <= 0:
            raise OSError(errno.EIO, f"writev returned {written}")
        if written == sum(map(len, batch)):  # the usual case: all of it
            start += len(batch)
            continue
        # Skip what was written: whole buffers, then the written head of the next one.
        while written:
            size = len(pending[start])
            if written < size:
                pending[start] = memoryview(pending[start])[written:]
                break
            written -= size
            start += 1
