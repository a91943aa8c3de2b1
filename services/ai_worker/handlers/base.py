"""What every task handler is: which stored texts a task reads, and its note.

A handler is data plus two pure steps. ``references`` says which of the
operation's two opaque references (subject, optional context) names the job
and which names the CV; the executor reads them through a ``WorkspaceReader``
in the owner's scope. ``request`` turns the texts into one bounded structured
request; ``note_body`` turns the validated answer into the published note.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from durable_ops.ai_worker.inference.request import InferenceRequest
from durable_ops.ai_worker.prompts import CvText, JobText, build_request, validate_answer
from durable_ops.model.errors import InvalidArgument


class WorkspaceReader(Protocol):
    """The owner's stored texts; ``NotFound`` when one was deleted (or is not theirs)."""

    async def job(self, job_id: str) -> JobText: ...

    async def cv(self, attachment_id: str) -> CvText: ...


@dataclass(frozen=True)
class References:
    job_id: str | None
    attachment_id: str | None


@dataclass(frozen=True)
class Inputs:
    job: JobText | None
    cv: CvText | None


@dataclass(frozen=True)
class TaskHandler:
    task_type: str
    subject_type: str
    # (subject id, context reference or "") -> the stored texts to read
    references: Callable[[str, str], References]

    def refs_for(self, subject_type: str, subject_id: str, context_ref: str) -> References:
        if subject_type != self.subject_type:
            # Admission never stores this; a row written by hand must not be guessed at.
            raise InvalidArgument(
                "subject_type", f"{self.task_type} works on a {self.subject_type}"
            )
        return self.references(subject_id, context_ref)

    async def inputs(self, reader: WorkspaceReader, refs: References) -> Inputs:
        job = await reader.job(refs.job_id) if refs.job_id else None
        cv = await reader.cv(refs.attachment_id) if refs.attachment_id else None
        return Inputs(job=job, cv=cv)

    def request(self, inputs: Inputs) -> InferenceRequest:
        return build_request(self.task_type, inputs.job, inputs.cv)

    def note_body(self, answer: dict[str, Any]) -> str:
        """The note is the answer itself, checked once more against the task's schema:
        whatever route produced it, nothing unvalidated is ever published."""
        checked = validate_answer(self.task_type, answer)
        return json.dumps(checked, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
