"""The worker SDK: run your own task types on durable-ops operations (ADR 0023).

from durable_ops.worker import Job, PermanentFailure, Worker

worker = Worker("127.0.0.1:50051", secret=os.environ["OPS_SERVICE_SECRET"])

@worker.handler("report.render")
async def render(job: Job) -> str:
    if job.subject.type != "report":
        raise PermanentFailure("unknown_subject", "only reports are rendered")
    await job.progress(50)
    return await render_report(job.subject.id)  # the result's reference

asyncio.run(worker.run())
"""

from durable_ops.worker.failures import (
    ExternalFallback,
    HandlerFailure,
    PermanentFailure,
    RetryableFailure,
    WorkerShutdown,
)
from durable_ops.worker.job import Ending, Job
from durable_ops.worker.outcomes import Completed
from durable_ops.worker.runner import Handler, JobContext, Worker, WorkerOptions

__all__ = [
    "Completed",
    "Ending",
    "ExternalFallback",
    "Handler",
    "HandlerFailure",
    "Job",
    "JobContext",
    "PermanentFailure",
    "RetryableFailure",
    "Worker",
    "WorkerOptions",
    "WorkerShutdown",
]
