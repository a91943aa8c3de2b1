"""Prometheus metrics of the inference routes."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import Enum, Gauge
from prometheus_client.samples import Sample

from durable_ops.model.circuit import CircuitBreaker, CircuitState

CIRCUIT_STATE_VALUES: dict[CircuitState, int] = {
    CircuitState.CLOSED: 0,
    CircuitState.HALF_OPEN: 1,
    CircuitState.OPEN: 2,
}

LOCAL_CIRCUIT_STATE = Gauge(
    "durable_ops_ai_local_circuit_state",
    "Local model circuit breaker: 0 closed, 1 half-open, 2 open",
)


class _EnumReadAtScrape(Enum):
    """An ``Enum`` whose state is read when it is scraped (open half-opens by the clock)."""

    read: Callable[[], str] | None = None

    def _child_samples(self) -> Iterable[Sample]:
        if self.read is not None:
            self.state(self.read())
        return super()._child_samples()


MODEL_CIRCUIT_STATE = _EnumReadAtScrape(
    "durable_ops_model_circuit_state",
    "Local model circuit breaker state, as a state set",
    states=[state.value for state in CircuitState],
)


def export_local_circuit(breaker: CircuitBreaker, clock: Callable[[], float]) -> None:
    """Report ``breaker`` as the local circuit, read at scrape time.

    Read lazily because open turns half-open by the clock alone. A process runs
    one local route, so the last breaker exported is the one that counts.
    """
    LOCAL_CIRCUIT_STATE.set_function(lambda: CIRCUIT_STATE_VALUES[breaker.state(clock())])
    MODEL_CIRCUIT_STATE.read = lambda: breaker.state(clock()).value
