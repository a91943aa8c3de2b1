"""The worker SDK: run your own task types on durable-ops operations (ADR 0023).

from durable_ops.worker import Attempt, PermanentFailure, Worker

# A worker key of its own: `opsctl keys issue reports` prints where it put it.
worker = Worker("127.0.0.1:50051", key="var/keys/worker-reports/worker-reports.key")

@worker.handler("report.render")
async def render(attempt: Attempt) -> str:
    if attempt.subject.type != "report":
        raise PermanentFailure("unknown_subject", "only reports are rendered")
    await attempt.progress(50)
    # attempt.used(Usage(...), provenance) for each model call: its settlement carries them
    return await render_report(attempt.subject.id)  # the result's reference

asyncio.run(worker.run())
"""

# The model's types the SDK's own API takes or raises, so a worker imports only from here.
from durable_ops.model.errors import CANCEL_REQUESTED, LeaseLost
from durable_ops.model.routing import Route
from durable_ops.model.states import Privacy
from durable_ops.model.usage import Usage
from durable_ops.worker.attempt import Attempt, Claimed, Ending, ModelCall, Subject
from durable_ops.worker.executor import Handler, Interceptor
from durable_ops.worker.failures import (
    Completed,
    ExternalFallback,
    HandlerFailure,
    InvalidHandlerCall,
    PermanentFailure,
    Provenance,
    RetryableFailure,
    WorkerShutdown,
)
from durable_ops.worker.lease import Lease
from durable_ops.worker.producer import WorkerOptions
from durable_ops.worker.runner import Worker

__all__ = [
    "CANCEL_REQUESTED",
    "Attempt",
    "Claimed",
    "Completed",
    "Ending",
    "ExternalFallback",
    "Handler",
    "HandlerFailure",
    "Interceptor",
    "InvalidHandlerCall",
    "Lease",
    "LeaseLost",
    "ModelCall",
    "PermanentFailure",
    "Privacy",
    "Provenance",
    "RetryableFailure",
    "Route",
    "Subject",
    "Usage",
    "Worker",
    "WorkerOptions",
    "WorkerShutdown",
]
