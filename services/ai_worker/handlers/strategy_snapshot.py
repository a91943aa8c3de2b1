"""``strategy.snapshot``: how well the owner's CV fits a job (seed 000).

The subject is the job; the optional context reference is the CV attachment.
Without one, the snapshot judges the posting alone.
"""

from __future__ import annotations

from durable_ops.ai_worker.handlers.base import References, TaskHandler
from durable_ops.ai_worker.prompts import STRATEGY_SNAPSHOT as TASK_TYPE


def _references(subject_id: str, context_ref: str) -> References:
    return References(job_id=subject_id, attachment_id=context_ref or None)


STRATEGY_SNAPSHOT = TaskHandler(task_type=TASK_TYPE, subject_type="job", references=_references)
