"""When to ask an absent database again, and how long an answer about it holds (ADR 16).

Pure: the caller passes the random source, the time waited and the clock
readings. ``storage.availability`` does the asking.

- **At start** a service asks until the database answers, pausing after the
  n-th failed attempt for a time drawn in ``[c/2, c]`` with
  ``c = min(0.1 s · 2^(n-1), 2 s)`` ("equal jitter": replicas started together
  spread out, yet no pause is so short that the log fills with attempts), and
  never past ``OPS_DATABASE_WAIT_SECONDS``: the last attempt falls on the bound.
- **While running** a health check reuses the last answer while it is younger
  than one second, so probes, however many, cost the database at most one
  ``SELECT 1`` a second per process.
"""

from __future__ import annotations

import math
from typing import Final

from durable_ops.model.lifecycle import Draw

WAIT_FIRST_PAUSE_SECONDS: Final = 0.1
WAIT_MAX_PAUSE_SECONDS: Final = 2.0
READING_MAX_AGE_SECONDS: Final = 1.0


def wait_pause(failures: int, draw: Draw) -> float:
    """Seconds to pause after the ``failures``-th failed attempt (1 for the first).

    Uniform in ``[c/2, c]``, ``c = min(0.1 s · 2^(failures-1), 2 s)``. A draw
    outside [0, 1], or NaN, is held to it, so the bounds hold for any source.
    """
    growth: float = 2.0 ** min(max(failures - 1, 0), 16)
    ceiling = min(WAIT_FIRST_PAUSE_SECONDS * growth, WAIT_MAX_PAUSE_SECONDS)
    value = draw()
    fraction = value if 0.0 <= value <= 1.0 else (1.0 if value > 1.0 else 0.0)
    return ceiling / 2 + fraction * ceiling / 2


def next_attempt_in(failures: int, waited: float, bound: float, draw: Draw) -> float | None:
    """Seconds until the next attempt after ``failures`` failed ones, or None: give up.

    ``waited`` is the time since the first attempt began and ``bound`` the
    longest wait allowed. The pause is cut short so the next attempt is never
    later than the bound; once the bound is reached there is none.
    """
    remaining = bound - waited
    if not remaining > 0.0:  # also NaN
        return None
    return min(wait_pause(failures, draw), remaining)


def is_fresh(read_at: float | None, now: float, max_age: float = READING_MAX_AGE_SECONDS) -> bool:
    """Whether an answer read at ``read_at`` (monotonic seconds) still holds at ``now``.

    No answer yet is never fresh; neither is one from the future (a clock
    that went back), nor any when ``max_age`` is not a positive number.
    """
    if read_at is None or not math.isfinite(read_at):
        return False
    age = now - read_at
    return 0.0 <= age < max_age
