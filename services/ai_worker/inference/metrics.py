"""Prometheus metrics of the inference routes."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import Gauge

from durable_ops.model.circuit import CircuitBreaker, CircuitState

CIRCUIT_STATE_VALUES: dict[CircuitState, int] = {
    CircuitState.CLOSED: 0,
    CircuitState.HALF_OPEN: 1,
    CircuitState.OPEN: 2,
}

LOCAL_CIRCUIT_STATE = Gauge(
    "ops_ai_local_circuit_state",
    "Local model circuit breaker: 0 closed, 1 half-open, 2 open",
)


def export_local_circuit(breaker: CircuitBreaker, clock: Callable[[], float]) -> None:
    """Report ``breaker`` as the local circuit, read at scrape time.

    Read lazily because open turns half-open by the clock alone. A process runs
    one local route, so the last breaker exported is the one that counts.
    """
    LOCAL_CIRCUIT_STATE.set_function(lambda: CIRCUIT_STATE_VALUES[breaker.state(clock())])
