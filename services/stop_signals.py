"""SIGTERM and SIGINT as a request to stop: what every long-running process here does
with them (the services drain, the workers release their leases)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def stopping_on_signals(callback: Callable[[], None]) -> Iterator[None]:
    """``callback`` on SIGTERM and SIGINT while inside; the loop's own handling after."""
    loop = asyncio.get_running_loop()
    installed = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        # Not possible off the main thread or on Windows: then the caller stops us by cancelling.
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signum, callback)
            installed.append(signum)
    try:
        yield
    finally:
        for signum in installed:
            loop.remove_signal_handler(signum)
