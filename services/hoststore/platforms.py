"""Which operating systems may acquire a host store.

Linux is supported: ``flock`` locks and file plus directory ``fsync``. Windows is
refused: the seed allows ``LockFileEx`` for development tests, but this build has
no Windows machine to prove that code on, and an unproven lock is worse than a
clear refusal. Every other system (macOS, the BSDs, ...) is refused as the seed
requires.
"""

from __future__ import annotations

import sys

from durable_ops.hoststore.errors import UnsupportedPlatform


def require_supported() -> None:
    # Read at call time so a test can monkeypatch sys.platform.
    platform = sys.platform
    if platform == "linux":
        return
    if platform in {"win32", "cygwin"}:
        raise UnsupportedPlatform(
            "the host store refuses Windows: LockFileEx locking is not implemented in"
            " this build; run the store on Linux"
        )
    raise UnsupportedPlatform(f"the host store supports Linux only, not {platform!r}")
