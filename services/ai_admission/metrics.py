"""The AI Admission process's domain metrics (``durable_ops_`` names, one registry).

Reasons are the stable error codes of the model (``not_entitled``,
``user_limit``, ...): a bounded set, never ids or text.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from durable_ops.rpc.metrics import PREFIX


class AdmissionMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.admissions = Counter(
            f"{PREFIX}admissions",
            "AI admissions answered with an operation, by outcome (admitted or reused)",
            ["outcome"],
            registry=registry,
        )
        self.refused = Counter(
            f"{PREFIX}admissions_refused",
            "AI admissions refused, by reason (the error code)",
            ["reason"],
            registry=registry,
        )
        for outcome in ("admitted", "reused"):
            self.admissions.labels(outcome=outcome)

    def answered(self, *, reused: bool) -> None:
        self.admissions.labels(outcome="reused" if reused else "admitted").inc()

    def refused_for(self, reason: str) -> None:
        self.refused.labels(reason=reason).inc()
