"""What a task handler is: which stored texts a task reads, and its note.

One handler serves every task type: the registry says what the subject and the
optional context reference are (each a ``SubjectKind``), the prompt says what
to ask. ``refs_for`` names the subjects behind the operation's two opaque
references; ``inputs`` reads each through a ``WorkspaceReader`` in the owner's
scope, under the attempt's lease (ADR 62), by its kind, with no reader per
kind. ``request`` turns the texts into one bounded structured request;
``note_body`` turns the validated answer into the published note.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from durable_ops.ai_worker.inference.request import InferenceRequest
from durable_ops.ai_worker.prompts import Prompt, SubjectText
from durable_ops.model.errors import InvalidArgument
from durable_ops.model.subjects import SubjectKind
from durable_ops.model.tasks import TaskType


class WorkspaceReader(Protocol):
    """The owner's stored texts the attempt's operation refers to; ``NotFound`` when one
    was deleted (or is not theirs, or not the operation's)."""

    async def read(self, kind: SubjectKind, subject_id: str) -> SubjectText: ...


@dataclass(frozen=True)
class Reference:
    """One subject an operation refers to: its kind and its opaque id."""

    kind: SubjectKind
    id: str


@dataclass(frozen=True)
class TaskHandler:
    prompt: Prompt

    @property
    def task(self) -> TaskType:
        return self.prompt.task

    @property
    def task_type(self) -> str:
        return self.task.name

    def refs_for(self, subject_type: str, subject_id: str, context_ref: str) -> list[Reference]:
        """The subject, then the context when the operation names one."""
        if subject_type != self.task.subject.name:
            # Admission never stores this; a row written by hand must not be guessed at.
            raise InvalidArgument(
                "subject_type", f"{self.task.name} works on a {self.task.subject.name}"
            )
        refs = [Reference(self.task.subject, subject_id)]
        if self.task.context is not None and context_ref:
            refs.append(Reference(self.task.context, context_ref))
        return refs

    async def inputs(self, reader: WorkspaceReader, refs: Sequence[Reference]) -> list[SubjectText]:
        return [await reader.read(ref.kind, ref.id) for ref in refs]

    def request(self, inputs: Sequence[SubjectText]) -> InferenceRequest:
        return self.prompt.request(inputs)

    def note_body(self, answer: dict[str, Any]) -> str:
        """The note is the answer itself, checked once more against the task's schema:
        whatever route produced it, nothing unvalidated is ever published."""
        checked = self.prompt.validate(answer)
        return json.dumps(checked, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
