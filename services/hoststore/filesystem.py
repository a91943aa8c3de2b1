"""The operating-system calls the store makes, gathered in one replaceable object.

Every open, write, sync and rename the store performs goes through a
``FileSystem``, so tests can inject failures at any single call or record the
order of calls. The default instance is a thin pass-through to ``os``.
"""

from __future__ import annotations

import os


class FileSystem:
    def open(self, name: str, flags: int, mode: int = 0o600, *, dir_fd: int | None = None) -> int:
        return os.open(name, flags, mode, dir_fd=dir_fd)

    def write(self, fd: int, data: bytes | memoryview) -> int:
        return os.write(fd, data)

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


def write_all(fs: FileSystem, fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = fs.write(fd, view)
        if written <= 0:
            raise OSError(f"write returned {written}")
        view = view[written:]
