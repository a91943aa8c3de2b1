"""The domain metrics' own rules, no I/O: counting a sweep, caching a read, the circuit Enum."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import REGISTRY, CollectorRegistry

from durable_ops.ai_worker.inference.metrics import MODEL_CIRCUIT_STATE, export_local_circuit
from durable_ops.clock import utc_now
from durable_ops.model.circuit import CircuitBreaker
from durable_ops.operations.metrics import OperationsMetrics
from durable_ops.rpc.metrics import CachedReading
from durable_ops.storage.db import Database
from durable_ops.storage.operations import SweepReport


def test_a_sweep_counts_its_run_and_each_change(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    db = Database(f"sqlite:///{tmp_path / 'never-queried.sqlite3'}")  # the gauges are not scraped
    metrics = OperationsMetrics(registry, db, utc_now)
    metrics.swept(SweepReport(expired_leases=2, deadlines=1, promoted=3))
    metrics.swept(None)

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert value("durable_ops_sweeper_runs_total", outcome="ok") == 1
    assert value("durable_ops_sweeper_runs_total", outcome="failed") == 1
    assert value("durable_ops_lease_expiries_total") == 2
    assert value("durable_ops_sweeper_changes_total", change="expired_lease") == 2
    assert value("durable_ops_sweeper_changes_total", change="deadline") == 1
    assert value("durable_ops_sweeper_changes_total", change="promoted") == 3
    metrics.claimed("strategy.snapshot", "local")
    assert value("durable_ops_operation_claims_total", task_type="strategy.snapshot", route="local")
    db.dispose()


def test_a_cached_reading_asks_once_per_period_and_keeps_the_last_answer() -> None:
    now = [0.0]
    answers: list[int] = []

    def read() -> int:
        if len(answers) == 1:
            answers.append(-1)
            raise ConnectionError("database away")
        answers.append(len(answers))
        return answers[-1]

    cached = CachedReading(read, 2.0, lambda: now[0])
    assert (cached.get(), cached.get()) == (0, 0)
    now[0] = 2.0
    assert cached.get() == 0  # the read failed: the last answer stays
    now[0] = 4.0
    assert cached.get() == 2
    assert len(answers) == 3


def test_the_circuit_enum_reads_the_breaker_when_scraped() -> None:
    seconds = [0.0]
    breaker = CircuitBreaker(failure_threshold=1, cooldown_seconds=10)
    export_local_circuit(breaker, lambda: seconds[0])

    def state() -> str:
        for state in ("closed", "half_open", "open"):
            labels = {"durable_ops_model_circuit_state": state}
            if REGISTRY.get_sample_value("durable_ops_model_circuit_state", labels) == 1:
                return state
        raise AssertionError("no state is set")

    assert MODEL_CIRCUIT_STATE.read is not None
    assert state() == "closed"
    ticket = breaker.allow(seconds[0])
    assert ticket is not None
    breaker.record_failure(seconds[0], ticket)
    assert state() == "open"
    seconds[0] = 11.0
    assert state() == "half_open"
