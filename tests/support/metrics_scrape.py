"""Reading Prometheus ``/metrics`` in tests: samples by name and labels, names by type."""

from __future__ import annotations

from collections.abc import Iterable

import httpx
from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

# The series a family of each type writes (what a PromQL expression can name).
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
    "gauge": ("",),
    "stateset": ("",),
    "info": ("_info",),
    "unknown": ("",),
}


class Scrape:
    def __init__(self, text: str) -> None:
        self.text = text
        self.families = list(text_string_to_metric_families(text))

    @property
    def names(self) -> set[str]:
        return series_names(self.families)

    def value(self, name: str, **labels: str) -> float:
        """The one sample of ``name`` with exactly these labels, 0 when there is none yet."""
        for family in self.families:
            for sample in family.samples:
                if sample.name == name and sample.labels == labels:
                    return float(sample.value)
        return 0.0

    def total(self, name: str, **labels: str) -> float:
        """The sum over every sample of ``name`` whose labels include these."""
        return sum(
            float(sample.value)
            for family in self.families
            for sample in family.samples
            if sample.name == name and labels.items() <= sample.labels.items()
        )


def scrape(port: int) -> Scrape:
    response = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
    assert response.status_code == 200
    return Scrape(response.text)


def series_names(families: Iterable[Metric]) -> set[str]:
    return {f"{family.name}{suffix}" for family in families for suffix in SUFFIXES[family.type]}


def registered_names(registry: CollectorRegistry) -> set[str]:
    """Every series name the registry's collectors write (counters with no child yet too)."""
    return series_names(registry.collect())
