"""Task handlers: which stored texts each task reads, its request, and its note."""

from __future__ import annotations

import asyncio
import json

import pytest

from durable_ops.ai_worker.handlers import HANDLERS, Reference, TaskHandler
from durable_ops.ai_worker.inference.errors import InvalidModelOutput
from durable_ops.ai_worker.main import registered_task_types
from durable_ops.ai_worker.prompts import SubjectText
from durable_ops.model import subjects
from durable_ops.model.errors import InvalidArgument
from durable_ops.model.prompt_sections import CV_SECTION, JOB_SECTION
from durable_ops.model.subjects import SubjectKind
from durable_ops.model.tasks import TASKS
from tests.support.prompts import cv_text, job_text

STRATEGY_SNAPSHOT = HANDLERS["strategy.snapshot"]
CV_REVIEW = HANDLERS["cv.review"]

JOB = job_text("Data Engineer", "Globex", "Python, Spark and Kafka.")
CV = cv_text("Built Spark pipelines in Python.")
SNAPSHOT_ANSWER = {
    "fit_score": 70,
    "summary": "Good fit.",
    "strengths": ["Spark"],
    "gaps": ["Kafka"],
    "next_steps": ["Apply."],
}


class Reader:
    def __init__(self) -> None:
        self.reads: list[tuple[str, str]] = []

    async def read(self, kind: SubjectKind, subject_id: str) -> SubjectText:
        self.reads.append((kind.name, subject_id))
        return JOB if kind is subjects.JOB else CV


def test_every_registered_task_has_a_handler_and_nothing_else_does() -> None:
    assert set(HANDLERS) == set(TASKS.names())
    for task_type, handler in HANDLERS.items():
        assert handler.task is TASKS.get(task_type)


def test_claims_ask_for_registered_types_highest_priority_first() -> None:
    assert registered_task_types() == ["strategy.snapshot", "cv.review"]


@pytest.mark.parametrize(
    ("handler", "subject_type", "context_ref", "expected"),
    [
        (STRATEGY_SNAPSHOT, "job", "cv-1", [(subjects.JOB, "subj"), (subjects.CV, "cv-1")]),
        (STRATEGY_SNAPSHOT, "job", "", [(subjects.JOB, "subj")]),
        (CV_REVIEW, "attachment", "job-1", [(subjects.CV, "subj"), (subjects.JOB, "job-1")]),
        (CV_REVIEW, "attachment", "", [(subjects.CV, "subj")]),
    ],
)
def test_references_name_the_subject_and_the_optional_context(
    handler: TaskHandler,
    subject_type: str,
    context_ref: str,
    expected: list[tuple[SubjectKind, str]],
) -> None:
    assert handler.refs_for(subject_type, "subj", context_ref) == [
        Reference(kind, subject_id) for kind, subject_id in expected
    ]


def test_a_subject_of_the_wrong_type_is_refused() -> None:
    with pytest.raises(InvalidArgument):
        STRATEGY_SNAPSHOT.refs_for("attachment", "a-1", "")
    with pytest.raises(InvalidArgument):
        CV_REVIEW.refs_for("job", "j-1", "")


def test_inputs_are_read_only_where_referenced() -> None:
    reader = Reader()
    refs = STRATEGY_SNAPSHOT.refs_for("job", "j-1", "")
    inputs = asyncio.run(STRATEGY_SNAPSHOT.inputs(reader, refs))
    assert inputs == [JOB]
    assert reader.reads == [("job", "j-1")]
    both = asyncio.run(CV_REVIEW.inputs(reader, CV_REVIEW.refs_for("attachment", "c-1", "j-2")))
    assert both == [CV, JOB]
    assert reader.reads[1:] == [("attachment", "c-1"), ("job", "j-2")]


def test_one_bounded_structured_request_per_task() -> None:
    request = CV_REVIEW.request([CV, JOB])
    assert request.schema_name == "cv_review"
    user = request.messages[-1]["content"]
    # The posting first, whichever the task is about (model.subjects.KINDS).
    assert JOB_SECTION in user
    assert user.index(JOB_SECTION) < user.index(CV_SECTION)
    assert request.validate is not None
    snapshot = STRATEGY_SNAPSHOT.request([JOB])
    assert CV_SECTION not in snapshot.messages[-1]["content"]
    with pytest.raises(InvalidArgument):
        CV_REVIEW.request([JOB])  # a review needs the CV


def test_the_note_is_the_validated_answer_in_canonical_json() -> None:
    body = STRATEGY_SNAPSHOT.note_body(dict(reversed(SNAPSHOT_ANSWER.items())))
    assert json.loads(body) == SNAPSHOT_ANSWER
    assert body == STRATEGY_SNAPSHOT.note_body(SNAPSHOT_ANSWER)  # order does not matter
    assert body.startswith('{"fit_score":70,')


@pytest.mark.parametrize(
    "answer",
    [
        {**SNAPSHOT_ANSWER, "fit_score": 101},
        {key: value for key, value in SNAPSHOT_ANSWER.items() if key != "summary"},
        {**SNAPSHOT_ANSWER, "extra": "x"},
        {**SNAPSHOT_ANSWER, "gaps": ["x"] * 7},
    ],
)
def test_an_answer_off_the_schema_never_becomes_a_note(answer: dict[str, object]) -> None:
    with pytest.raises(InvalidModelOutput):
        STRATEGY_SNAPSHOT.note_body(answer)


def test_the_note_keeps_text_in_the_answers_language_as_it_is() -> None:
    """Unescaped: a note in Greek or Japanese is stored at its own length, not six
    characters per letter against the note's size limit."""
    answer = {**SNAPSHOT_ANSWER, "summary": "Καλή ταίριασμα, 良い"}
    body = STRATEGY_SNAPSHOT.note_body(answer)
    assert "Καλή ταίριασμα, 良い" in body
    assert json.loads(body) == answer
