"""An action on another thread while the test waits for what it causes."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

HANG_GUARD = 20.0


@contextmanager
def later(action: Callable[[], object], delay: float = 0.3) -> Iterator[None]:
    """Run ``action`` on another thread ``delay`` seconds from now, while the block waits.

    The block's end waits for the action's own call to return (the wait may answer
    first, from the commit the call made, before its reply is read) and raises what
    it raised, so a test never ends with a call still on a channel about to close.
    """
    failures: list[BaseException] = []

    def run() -> None:
        time.sleep(delay)
        try:
            action()
        except BaseException as failure:  # raised in the test, not lost in the thread
            failures.append(failure)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    yield
    thread.join(HANG_GUARD)
    assert not thread.is_alive(), "the action did not return"
    if failures:
        raise failures[0]
