"""When a child that died after start-up comes back, and when to give up.

Pure: the caller passes the clock. A child gets ``limit`` restarts within any
``window`` seconds, each waiting twice as long as the one before (from
``first_delay`` up to ``max_delay``); one more crash inside the window means
something is wrong that a restart will not fix.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

RESTART_LIMIT = 5
RESTART_WINDOW_SECONDS = 300.0
FIRST_DELAY_SECONDS = 0.5
MAX_DELAY_SECONDS = 10.0


@dataclass
class RestartBudget:
    limit: int = RESTART_LIMIT
    window: float = RESTART_WINDOW_SECONDS
    first_delay: float = FIRST_DELAY_SECONDS
    max_delay: float = MAX_DELAY_SECONDS
    _restarts: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))

    def next_delay(self, name: str, now: float) -> float | None:
        """Seconds to wait before restarting ``name``, or None when its budget is spent."""
        recent = [at for at in self._restarts[name] if now - at < self.window]
        if len(recent) >= self.limit:
            return None
        recent.append(now)
        self._restarts[name] = recent
        return min(self.first_delay * 2.0 ** (len(recent) - 1), self.max_delay)

    def used(self, name: str) -> int:
        return len(self._restarts[name])
