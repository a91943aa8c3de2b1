"""What a task handler is: which stored texts a task reads, and its note.

One handler serves every task type: the registry says what the subject and the
optional context reference are (a job, a CV), the prompt says what to ask.
``references`` names the job and the CV behind the operation's two opaque
references; the executor reads them through a ``WorkspaceReader`` in the
owner's scope. ``request`` turns the texts into one bounded structured request;
``note_body`` turns the validated answer into the published note.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

from durable_ops.ai_worker.inference.request import InferenceRequest
from durable_ops.ai_worker.prompts import CvText, JobText, Prompt
from durable_ops.model.errors import InvalidArgument
from durable_ops.model.tasks import CV, JOB, TaskType


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
    prompt: Prompt

    @property
    def task(self) -> TaskType:
        return self.prompt.task

    @property
    def task_type(self) -> str:
        return self.task.name

    def refs_for(self, subject_type: str, subject_id: str, context_ref: str) -> References:
        if subject_type != self.task.subject.name:
            # Admission never stores this; a row written by hand must not be guessed at.
            raise InvalidArgument(
                "subject_type", f"{self.task.name} works on a {self.task.subject.name}"
            )
        named = {self.task.subject.name: subject_id}
        if self.task.context is not None and context_ref:
            named[self.task.context.name] = context_ref
        return References(job_id=named.get(JOB.name), attachment_id=named.get(CV.name))

    async def inputs(self, reader: WorkspaceReader, refs: References) -> Inputs:
        job = await reader.job(refs.job_id) if refs.job_id else None
        cv = await reader.cv(refs.attachment_id) if refs.attachment_id else None
        return Inputs(job=job, cv=cv)

    def request(self, inputs: Inputs) -> InferenceRequest:
        return self.prompt.request(inputs.job, inputs.cv)

    def note_body(self, answer: dict[str, Any]) -> str:
        """The note is the answer itself, checked once more against the task's schema:
        whatever route produced it, nothing unvalidated is ever published."""
        checked = self.prompt.validate(answer)
        return json.dumps(checked, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
