"""What the worker's model calls used, as Prometheus counters (issue 36).

Counted by the completer once the service accepted the settlement that carried the
usage, or refused it as a lost lease but charged the usage all the same, so a call is
counted once whatever the retries of its settlement; a settlement refused otherwise or
never answered records nothing in the database and counts nothing here.
On the default registry: the AI worker serves it on ``OPS_WORKER_METRICS_BIND``.
"""

from __future__ import annotations

from prometheus_client import Counter

from durable_ops.worker.attempt import ModelCall

MODEL_TOKENS = Counter(
    "durable_ops_model_tokens",
    "Tokens the model servers counted for settled attempts, by task type, route, model and"
    " kind (prompt or completion)",
    ["task_type", "route", "model", "kind"],
)
MODEL_SECONDS = Counter(
    "durable_ops_model_seconds",
    "The model's own time spent on settled attempts, by task type, route and model",
    ["task_type", "route", "model"],
)


def count(task_type: str, calls: list[ModelCall]) -> None:
    """Count ``calls`` of one settled attempt of ``task_type``."""
    for call in calls:
        provenance, usage = call.provenance, call.usage
        labels = {"task_type": task_type, "route": provenance.route, "model": provenance.model}
        MODEL_TOKENS.labels(**labels, kind="prompt").inc(usage.prompt_tokens)
        MODEL_TOKENS.labels(**labels, kind="completion").inc(usage.completion_tokens)
        MODEL_SECONDS.labels(**labels).inc(usage.model_seconds)
