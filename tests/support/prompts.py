"""The registered tasks' prompts by task type name, as the tests use them.

The product reaches a prompt through its handler (``ai_worker.handlers.HANDLERS``);
these shorthands do the same. ``job_text`` and ``cv_text`` spell the two kinds'
texts as the Workspace reads give them; an input left out is ``None``.
"""

from __future__ import annotations

import copy
from typing import Any

from durable_ops.ai_worker.handlers import HANDLERS
from durable_ops.ai_worker.inference.request import InferenceRequest
from durable_ops.ai_worker.prompts import Prompt, SubjectText
from durable_ops.model.subjects import CV, JOB


def job_text(title: str, company: str, description: str) -> SubjectText:
    return SubjectText.of(JOB, title=title, company=company, description=description)


def cv_text(text: str) -> SubjectText:
    return SubjectText.of(CV, text=text)


def prompt(task_type: str) -> Prompt:
    return HANDLERS[task_type].prompt


def answer_schema(task_type: str) -> tuple[str, dict[str, Any]]:
    """(schema name, JSON schema) of the answer to ``task_type``; the schema is a copy."""
    task = prompt(task_type).task
    return task.schema_name, copy.deepcopy(dict(task.answer))


def validate_answer(task_type: str, data: object) -> dict[str, Any]:
    return prompt(task_type).validate(data)


def build_messages(task_type: str, *texts: SubjectText | None) -> list[dict[str, str]]:
    return prompt(task_type).messages([text for text in texts if text is not None])


def build_request(task_type: str, *texts: SubjectText | None) -> InferenceRequest:
    return prompt(task_type).request([text for text in texts if text is not None])
