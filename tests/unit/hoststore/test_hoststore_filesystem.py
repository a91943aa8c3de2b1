"""write_all: every piece of the document reaches the file, in order, despite short writes."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from durable_ops.hoststore.filesystem import IOV_MAX, FileSystem, write_all


class ShortWrites(FileSystem):
    """Writes at most ``limit`` bytes per call and records how many buffers each call got."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.buffer_counts: list[int] = []

    def writev(self, fd: int, buffers: Sequence[bytes | memoryview]) -> int:
        self.buffer_counts.append(len(buffers))
        joined = b"".join(bytes(buffer) for buffer in buffers)
        return os.write(fd, joined[: self.limit])


COUNTS = [0, 1, 3, IOV_MAX - 1, IOV_MAX, IOV_MAX + 1, 2 * IOV_MAX + 5]
CASES = [(count, limit) for count in COUNTS for limit in (7, 1000, 1 << 30)]
CASES += [(count, 1) for count in (0, 1, 3, 40)]  # one byte a call: every split point


@pytest.mark.parametrize(("count", "limit"), CASES)
def test_all_pieces_are_written_in_order(tmp_path: Path, count: int, limit: int) -> None:
    parts = [f"<{index}:{'x' * (index % 5)}>".encode() for index in range(count)]
    parts[count // 2 : count // 2] = [b""]  # empty pieces are skipped, not written
    fs = ShortWrites(limit)
    fd = os.open(tmp_path / "out", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        write_all(fs, fd, parts)
    finally:
        os.close(fd)
    assert (tmp_path / "out").read_bytes() == b"".join(parts)
    assert all(0 < n <= IOV_MAX for n in fs.buffer_counts)


def test_a_write_of_nothing_is_an_error(tmp_path: Path) -> None:
    class Stuck(FileSystem):
        def writev(self, fd: int, buffers: Sequence[bytes | memoryview]) -> int:
            return 0

    fd = os.open(tmp_path / "out", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with pytest.raises(OSError, match="writev returned 0"):
            write_all(Stuck(), fd, [b"data"])
    finally:
        os.close(fd)


def test_the_default_writev_is_the_real_one(tmp_path: Path) -> None:
    fd = os.open(tmp_path / "out", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        write_all(FileSystem(), fd, [b"a" * 5000, b"", b"b", memoryview(b"cd")[1:].tobytes()])
    finally:
        os.close(fd)
    assert (tmp_path / "out").read_bytes() == b"a" * 5000 + b"bd"
