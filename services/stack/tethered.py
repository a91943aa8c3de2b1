"""``python -m durable_ops.stack.tethered PID serve …``: ``opsctl serve …`` as a child
that does not outlive its supervisor, the process ``PID``.

Before anything else it asks Linux for SIGTERM when its parent dies
(``PR_SET_PDEATHSIG``), so a supervisor killed outright (``kill -9`` of ``opsctl up``,
whose handlers never run) still takes its children down, each through its usual
graceful stop, and frees their ports. Done here, at the top of the child, rather than
in ``subprocess``'s ``preexec_fn``: the supervisor has threads (each child's relay,
the health checks' gRPC), and Python code run between fork and exec in a threaded
process may deadlock. The request survives an exec, so this module then execs
``opsctl`` itself (importing the CLI from here would turn the layers upside down), and
it covers all of the child's life but the moment before it was made, which the
``getppid`` check covers: a parent that died before the request (the child now belongs
to init or a subreaper) means no signal will come, and nothing is started.

Linux sends the signal when the *thread* that started the child ends, not the
process: the supervisor must start and restart its tethered children from a thread
that lives as long as they do (``opsctl up`` uses its main thread).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def command(parent: int, args: Sequence[str]) -> list[str]:
    """The command line of ``opsctl *args`` tethered to the process ``parent``."""
    return [sys.executable, "-m", __name__, str(parent), *args]


def tether(parent: int) -> bool:
    """SIGTERM when our parent dies; False when it already has (and no signal will come)."""
    import ctypes  # here: `opsctl up`, which only builds the command, needs none of it

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGTERM), 0, 0, 0) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"prctl(PR_SET_PDEATHSIG): {os.strerror(error)}")
    return os.getppid() == parent


def main(argv: Sequence[str]) -> int:
    parent, *args = argv
    if not tether(int(parent)):
        return 0  # its supervisor is gone: what it would have served is not wanted
    # The parent-death signal outlives exec; opsctl then runs as any child's would.
    opsctl = [sys.executable, "-m", "durable_ops.cli", *args]
    os.execv(sys.executable, opsctl)  # noqa: S606 - our interpreter, our own module


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
