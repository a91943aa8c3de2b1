"""The Notifications process's domain metrics (``durable_ops_`` names, one registry).

A notification is written in the transaction that ends its operation (by the
Operations process), so the exact figure is the database's: notifications
stored, by outcome, for every owner, read at scrape time and cached. Its
``increase()`` is the notifications written, less those a manual retry took
back.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from durable_ops.model.states import TERMINAL_STATES
from durable_ops.rpc.metrics import PREFIX, CachedReading
from durable_ops.storage import metrics_queries
from durable_ops.storage.db import Database

DATABASE_READ_SECONDS = 2.0


class _NotificationsCollector(Collector):
    def __init__(self, db: Database, seconds: float) -> None:
        self._counts = CachedReading(
            lambda: db.run(metrics_queries.notification_counts, owner_id=None, write=False),
            seconds,
            time.monotonic,
        )

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return iter([self._family(None)])

    def collect(self) -> Iterator[GaugeMetricFamily]:
        return iter([self._family(self._counts.get())])

    @staticmethod
    def _family(counts: dict[str, int] | None) -> GaugeMetricFamily:
        family = GaugeMetricFamily(
            f"{PREFIX}notifications",
            "Notifications stored for every owner, by outcome (written when an operation ends)",
            labels=["outcome"],
        )
        if counts is not None:
            for outcome in sorted({*(state.value for state in TERMINAL_STATES), *counts}):
                family.add_metric([outcome], counts.get(outcome, 0))
        return family


def register_notifications_metrics(
    registry: CollectorRegistry,
    db: Database,
    *,
    database_read_seconds: float = DATABASE_READ_SECONDS,
) -> None:
    registry.register(_NotificationsCollector(db, database_read_seconds))
