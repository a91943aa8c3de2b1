"""The Operations process's domain metrics (``durable_ops_`` names, one registry).

Counted where they happen: claims (``ClaimOperation``), operations ended (each
terminal transition this replica commits, as ``Database.events`` tells it: every
one writes its operation's notification in the same transaction), sweeper runs
and what each changed (lease expiries among them), retention's prunes. Read from
the database at scrape time, cached for ``Tuning.metrics_cache_seconds``, as
the console reads them (``storage.operator.queue_depths``, ADR 0052): unfinished
operations by state and task type and the age of the oldest queued one, for
every owner.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from threading import Lock

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from durable_ops.clock import Clock
from durable_ops.model.states import ACTIVE_STATES
from durable_ops.operations.tuning import TUNING
from durable_ops.rpc.metrics import PREFIX, CachedReading
from durable_ops.storage import operator
from durable_ops.storage.db import Database
from durable_ops.storage.events import Changed, Committed
from durable_ops.storage.operations import SweepReport
from durable_ops.storage.retention import PruneBatch
from durable_ops.storage.tx import OperatorTx

SWEEP_CHANGES = ("expired_lease", "deadline", "promoted")


class _OperationsCollector(Collector):
    def __init__(self, db: Database, clock: Clock) -> None:
        self._clock = clock
        # Task types this process has reported: one whose last operation finished keeps
        # its zeros, so a drained queue reads 0 on a graph and in an alert, not "no data".
        self._seen: set[str] = set()
        self._seen_lock = Lock()  # two Prometheus servers may scrape at once (two threads)
        self._depths = CachedReading(
            lambda: db.run(
                lambda tx: operator.queue_depths(OperatorTx(tx)), owner_id=None, write=False
            ),
            TUNING.metrics_cache_seconds,
            time.monotonic,
        )

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return iter(self._families(None))

    def collect(self) -> Iterator[GaugeMetricFamily]:
        return iter(self._families(self._depths.get()))

    def _families(self, depths: list[operator.QueueDepth] | None) -> list[GaugeMetricFamily]:
        operations = GaugeMetricFamily(
            f"{PREFIX}operations",
            "Unfinished operations of every owner, by state and task type",
            labels=["state", "task_type"],
        )
        oldest = GaugeMetricFamily(
            f"{PREFIX}oldest_queued_operation_age_seconds",
            "How long the oldest queued operation has waited to be claimed (0: none queued)",
        )
        if depths is None:
            return [operations, oldest]
        states = sorted(ACTIVE_STATES)
        counts = {depth.task_type: depth.counts for depth in depths}
        with self._seen_lock:
            self._seen.update(counts)
            seen = sorted(self._seen)
        for task_type in seen:  # every state of a seen task type: stable series
            for state in states:
                operations.add_metric([state, task_type], counts.get(task_type, {}).get(state, 0))
        waiting = [d.oldest_queued_at for d in depths if d.oldest_queued_at is not None]
        age = 0.0
        if waiting:  # aware: the column type (``UtcDateTime``) makes every read UTC
            age = max(0.0, (self._clock() - min(waiting)).total_seconds())
        oldest.add_metric([], age)
        return [operations, oldest]


class OperationsMetrics:
    def __init__(self, registry: CollectorRegistry, db: Database, clock: Clock) -> None:
        def counter(name: str, doc: str, *labels: str) -> Counter:
            return Counter(f"{PREFIX}{name}", doc, labels, registry=registry)

        self.claims = counter(
            "operation_claims",
            "Operations claimed by workers, by task type and route",
            "task_type",
            "route",
        )
        self.finished = counter(
            "operations_finished",
            "Operations this replica ended, by outcome (succeeded, failed, cancelled) and task"
            " type; each wrote its one notification",
            "outcome",
            "task_type",
        )
        self.lease_expiries = counter(
            "lease_expiries", "Leases the sweeper found expired (their operation retried or failed)"
        )
        self.sweeper_runs = counter(
            "sweeper_runs", "Sweeper passes, by outcome (ok or failed)", "outcome"
        )
        self.sweeper_changes = counter(
            "sweeper_changes",
            "Operations the sweeper changed, by change (expired_lease, deadline, promoted)",
            "change",
        )
        self.pruned_operations = counter(
            "operations_pruned",
            "Terminal operations deleted by retention, each leaving a tombstone",
        )
        self.forgotten_tombstones = counter(
            "tombstones_forgotten", "Idempotency tombstones deleted past their horizon"
        )
        for outcome in ("ok", "failed"):
            self.sweeper_runs.labels(outcome=outcome)
        for change in SWEEP_CHANGES:
            self.sweeper_changes.labels(change=change)
        registry.register(_OperationsCollector(db, clock))
        db.events.subscribe(self._committed)

    def _committed(self, changes: Sequence[Committed]) -> None:
        for change in changes:
            if isinstance(change, Changed) and change.state.is_terminal:
                self.finished.labels(outcome=change.state.value, task_type=change.task_type).inc()

    def claimed(self, task_type: str, route: str) -> None:
        self.claims.labels(task_type=task_type, route=route).inc()

    def pruned(self, batch: PruneBatch) -> None:
        self.pruned_operations.inc(batch.pruned)
        self.forgotten_tombstones.inc(batch.forgotten)

    def swept(self, report: SweepReport | None) -> None:
        """One sweeper pass: its report, or ``None`` when it failed."""
        if report is None:
            self.sweeper_runs.labels(outcome="failed").inc()
            return
        self.sweeper_runs.labels(outcome="ok").inc()
        self.lease_expiries.inc(report.expired_leases)
        self.sweeper_changes.labels(change="expired_lease").inc(report.expired_leases)
        self.sweeper_changes.labels(change="deadline").inc(report.deadlines)
        self.sweeper_changes.labels(change="promoted").inc(report.promoted)
