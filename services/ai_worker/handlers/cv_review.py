"""``cv.review``: a review of the owner's CV, optionally against a job (AI-004).

The subject is the CV attachment; the optional context reference is the job.
"""

from __future__ import annotations

from durable_ops.ai_worker.handlers.base import References, TaskHandler
from durable_ops.ai_worker.prompts import CV_REVIEW as TASK_TYPE


def _references(subject_id: str, context_ref: str) -> References:
    return References(job_id=context_ref or None, attachment_id=subject_id)


CV_REVIEW = TaskHandler(task_type=TASK_TYPE, subject_type="attachment", references=_references)
