"""``var/up.lock``: one ``opsctl up`` per directory, refused with the holder's pid."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from durable_ops.stack import lock


def test_a_free_directory_is_checked_without_making_a_file(tmp_path: Path) -> None:
    lock.check_free(tmp_path / "var" / "up.lock")
    assert list(tmp_path.iterdir()) == []


def test_a_held_lock_is_refused_naming_its_pid_and_freed_when_its_holder_ends(
    tmp_path: Path,
) -> None:
    path = tmp_path / "var" / "up.lock"
    # Another process holds it, as a running `opsctl up` would.
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from durable_ops.stack import lock;"
            f" lock.take(__import__('pathlib').Path({str(path)!r})); print('held', flush=True);"
            " sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "held\n"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        for attempt in (lock.check_free, lock.take):
            with pytest.raises(lock.StackRunning) as refused:
                attempt(path)
            assert refused.value.pid == holder.pid
            assert f"another opsctl up (pid {holder.pid}) runs from this directory" in str(
                refused.value
            )
    finally:
        assert holder.stdin is not None
        holder.stdin.close()  # it ends, and the kernel drops its lock
        holder.wait(timeout=10)
    descriptor = lock.take(path)
    try:
        assert path.read_text() == f"{os.getpid()}\n"
    finally:
        os.close(descriptor)
