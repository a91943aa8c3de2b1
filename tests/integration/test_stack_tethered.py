"""A tethered child (``stack.tethered``) gets SIGTERM when its parent dies, and one whose
parent died before it asked starts nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tests.support import procs

GRANDCHILD = textwrap.dedent(
    """
    import os, signal, sys, time
    from durable_ops.stack.tethered import tether

    def stopped(_signum, _frame):
        print("SIGTERM", flush=True)
        sys.exit(0)

    signal.signal(signal.SIGTERM, stopped)
    assert tether(os.getppid())
    print("tethered", flush=True)
    time.sleep(60)
    """
)
PARENT = textwrap.dedent(
    """
    import subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", sys.argv[1]], stdout=open(sys.argv[2], "w"))
    print(child.pid, flush=True)
    time.sleep(60)
    """
)


def test_a_tethered_child_is_sent_sigterm_when_its_parent_is_killed(tmp_path: Path) -> None:
    said = tmp_path / "grandchild.txt"
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, GRANDCHILD, str(said)], stdout=subprocess.PIPE, text=True
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    try:
        deadline = time.monotonic() + 10
        while "tethered" not in said.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert said.read_text() == "tethered\n"
        parent.kill()  # no handler, no stop: only the kernel can tell the child
        parent.wait()
        deadline = time.monotonic() + 5
        while procs.alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not procs.alive(child)
        assert said.read_text() == "tethered\nSIGTERM\n"  # its own handler: a graceful stop
    finally:
        if procs.alive(child):
            os.kill(child, signal.SIGKILL)


def test_a_child_whose_parent_is_already_gone_starts_nothing(tmp_path: Path) -> None:
    # Its parent is this test, not pid 1: as if the supervisor it was started for (pid 1
    # here) had died before the child could ask to follow it.
    done = subprocess.run(
        [sys.executable, "-m", "durable_ops.stack.tethered", "1", "serve", "operations"],
        cwd=tmp_path,
        env={key: value for key, value in os.environ.items() if not key.startswith("OPS_")},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert not (tmp_path / "var").exists()  # `opsctl serve` never ran
