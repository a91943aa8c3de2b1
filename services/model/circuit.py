"""A process-local circuit breaker for the single local model (AI-002).

    closed --N consecutive failures--> open --cooldown--> half_open
    half_open --trial succeeds--> closed
    half_open --trial fails-----> open (cooldown starts again)

``now`` is monotonic seconds, passed in. The half-open state admits one trial
call. A trial whose outcome never arrives (its caller was cancelled) expires
after another cooldown, so a lost trial cannot wedge the breaker half-open.
"""

from __future__ import annotations

from enum import StrEnum


class CircuitState(StrEnum):
    CLOSED = "closed"
    HALF_OPEN = "half_open"
    OPEN = "open"


class CircuitBreaker:
    def __init__(self, failure_threshold: int, cooldown_seconds: float) -> None:
        if failure_threshold < 1:
            raise ValueError("failure_threshold must be at least 1")
        if cooldown_seconds < 0:
            raise ValueError("cooldown_seconds must not be negative")
        self.failure_threshold = failure_threshold
        self.cooldown_seconds = cooldown_seconds
        self._consecutive_failures = 0
        self._opened_at: float | None = None
        self._trial_started_at: float | None = None

    @property
    def consecutive_failures(self) -> int:
        return self._consecutive_failures

    def state(self, now: float) -> CircuitState:
        if self._opened_at is None:
            return CircuitState.CLOSED
        if now - self._opened_at >= self.cooldown_seconds:
            return CircuitState.HALF_OPEN
        return CircuitState.OPEN

    def allow(self, now: float) -> bool:
        """Whether a call may go to the model now; in half-open, takes the trial."""
        state = self.state(now)
        if state is CircuitState.CLOSED:
            return True
        if state is CircuitState.OPEN:
            return False
        trial_lost = (
            self._trial_started_at is not None
            and now - self._trial_started_at >= self.cooldown_seconds
        )
        if self._trial_started_at is None or trial_lost:
            self._trial_started_at = now
            return True
        return False

    def record_success(self, now: float) -> None:
        # Any answer proves the model is up, even one admitted before the circuit opened.
        self._consecutive_failures = 0
        self._opened_at = None
        self._trial_started_at = None

    def record_failure(self, now: float) -> None:
        state = self.state(now)
        if state is CircuitState.OPEN:
            # A call admitted before the circuit opened; the cooldown already runs.
            return
        self._consecutive_failures += 1
        if state is CircuitState.HALF_OPEN or (
            self._consecutive_failures >= self.failure_threshold
        ):
            self._opened_at = now
            self._trial_started_at = None
