"""A process-local circuit breaker for the single local model (AI-002).

    closed --N consecutive failures--> open --cooldown--> half_open
    half_open --trial succeeds--> closed
    half_open --trial fails-----> open (cooldown starts again)

``now`` is monotonic seconds, passed in. ``allow`` admits a call with a ``Ticket`` (None
when it refuses), and the call's failure is recorded with its ticket, so the breaker
knows which call is the trial. The half-open state admits one trial call, and only the
trial's failure reopens the circuit: a call admitted before the circuit opened (a model
that held it for a timeout, a request it dropped) may fail while the trial still runs,
and that says nothing of the model now, so it neither reopens the circuit nor takes the
trial's verdict from it. A trial whose outcome never arrives (its caller was cancelled)
expires after another cooldown, so a lost trial cannot wedge the breaker half-open; the
next trial is another call, and the lost one's late failure is no longer the trial's.
Any answer closes the circuit, whoever's: an answer proves the model is up, even one to
a call admitted before the circuit opened. While closed, every failure counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class CircuitState(StrEnum):
    CLOSED = "closed"
    HALF_OPEN = "half_open"
    OPEN = "open"


@dataclass(frozen=True)
class Ticket:
    """One call ``allow`` admitted, handed back to ``record_failure`` if it fails."""

    trial: int | None  # which half-open trial it is (the breaker counts them), or None


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
        self._trials = 0  # trials admitted so far: the number of the latest
        self._trial_started_at: float | None = None  # the latest, while it is out

    @property
    def consecutive_failures(self) -> int:
        return self._consecutive_failures

    def state(self, now: float) -> CircuitState:
        if self._opened_at is None:
            return CircuitState.CLOSED
        if now - self._opened_at >= self.cooldown_seconds:
            return CircuitState.HALF_OPEN
        return CircuitState.OPEN

    def allow(self, now: float) -> Ticket | None:
        """The call's ticket if it may go to the model now (in half-open, as the trial),
        else None."""
        state = self.state(now)
        if state is CircuitState.CLOSED:
            return Ticket(trial=None)
        if state is CircuitState.OPEN:
            return None
        trial_lost = (
            self._trial_started_at is not None
            and now - self._trial_started_at >= self.cooldown_seconds
        )
        if self._trial_started_at is None or trial_lost:
            self._trials += 1
            self._trial_started_at = now
            return Ticket(trial=self._trials)
        return None

    def record_success(self, now: float) -> None:
        # Any answer proves the model is up, even one admitted before the circuit opened.
        self._consecutive_failures = 0
        self._opened_at = None
        self._trial_started_at = None

    def record_failure(self, now: float, ticket: Ticket) -> None:
        """The call admitted with ``ticket`` failed."""
        state = self.state(now)
        if state is CircuitState.OPEN:
            # A call admitted before the circuit opened; the cooldown already runs.
            return
        if state is CircuitState.HALF_OPEN and not self._is_trial(ticket):
            # Admitted before the circuit opened, or a lost trial another replaced: the
            # trial out now, or the next one, says whether the model is back.
            return
        self._consecutive_failures += 1
        if state is CircuitState.HALF_OPEN or (
            self._consecutive_failures >= self.failure_threshold
        ):
            self._opened_at = now
            self._trial_started_at = None

    def _is_trial(self, ticket: Ticket) -> bool:
        """Whether ``ticket`` is the trial out now."""
        return self._trial_started_at is not None and ticket.trial == self._trials
