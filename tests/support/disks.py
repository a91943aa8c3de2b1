"""A small real disk for the tests of a full one: a tmpfs, mounted as root only."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_disk(mount_point: Path, size: str = "16m") -> Iterator[Path]:
    """A tmpfs of ``size`` at ``mount_point`` (made), unmounted after; the test is skipped
    where it cannot be mounted."""
    mount_point.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount_point)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr!r}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=True)


def make_read_only(mount_point: Path) -> None:
    """Remount ``small_disk``'s tmpfs read-only: every write under it fails with EROFS,
    for root too (a mode would not stop root)."""
    subprocess.run(["mount", "-o", "remount,ro", str(mount_point)], check=True)


def fill(path: Path) -> None:
    """Write ``path`` until the disk has not a byte left; delete it to give space back."""
    block = b"\0" * 65536
    with path.open("wb", buffering=0) as filler:
        while True:
            try:
                filler.write(block)
            except OSError as full:
                if full.errno != errno.ENOSPC:
                    raise
                if len(block) == 1:
                    return
                block = block[: len(block) // 2]
