"""Task handlers: which stored texts each task reads, its request, and its note."""

from __future__ import annotations

import asyncio
import json

import pytest

from durable_ops.ai_worker.handlers import HANDLERS, Inputs, References, TaskHandler
from durable_ops.ai_worker.inference.errors import InvalidModelOutput
from durable_ops.ai_worker.main import registered_task_types
from durable_ops.ai_worker.prompts import CvText, JobText
from durable_ops.model.errors import InvalidArgument
from durable_ops.model.prompt_sections import CV_SECTION, JOB_SECTION
from durable_ops.model.tasks import TASKS

STRATEGY_SNAPSHOT = HANDLERS["strategy.snapshot"]
CV_REVIEW = HANDLERS["cv.review"]

JOB = JobText(title="Data Engineer", company="Globex", description="Python, Spark and Kafka.")
CV = CvText(text="Built Spark pipelines in Python.")
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

    async def job(self, job_id: str) -> JobText:
        self.reads.append(("job", job_id))
        return JOB

    async def cv(self, attachment_id: str) -> CvText:
        self.reads.append(("cv", attachment_id))
        return CV


def test_every_registered_task_has_a_handler_and_nothing_else_does() -> None:
    assert set(HANDLERS) == set(TASKS.names())
    for task_type, handler in HANDLERS.items():
        assert handler.task is TASKS.get(task_type)


def test_claims_ask_for_registered_types_highest_priority_first() -> None:
    assert registered_task_types() == ["strategy.snapshot", "cv.review"]


@pytest.mark.parametrize(
    ("handler", "subject_type", "context_ref", "expected"),
    [
        (STRATEGY_SNAPSHOT, "job", "cv-1", References(job_id="subj", attachment_id="cv-1")),
        (STRATEGY_SNAPSHOT, "job", "", References(job_id="subj", attachment_id=None)),
        (CV_REVIEW, "attachment", "job-1", References(job_id="job-1", attachment_id="subj")),
        (CV_REVIEW, "attachment", "", References(job_id=None, attachment_id="subj")),
    ],
)
def test_references_name_the_subject_and_the_optional_context(
    handler: TaskHandler, subject_type: str, context_ref: str, expected: References
) -> None:
    assert handler.refs_for(subject_type, "subj", context_ref) == expected


def test_a_subject_of_the_wrong_type_is_refused() -> None:
    with pytest.raises(InvalidArgument):
        STRATEGY_SNAPSHOT.refs_for("attachment", "a-1", "")
    with pytest.raises(InvalidArgument):
        CV_REVIEW.refs_for("job", "j-1", "")


def test_inputs_are_read_only_where_referenced() -> None:
    reader = Reader()
    refs = STRATEGY_SNAPSHOT.refs_for("job", "j-1", "")
    inputs = asyncio.run(STRATEGY_SNAPSHOT.inputs(reader, refs))
    assert inputs == Inputs(job=JOB, cv=None)
    assert reader.reads == [("job", "j-1")]
    both = asyncio.run(CV_REVIEW.inputs(reader, CV_REVIEW.refs_for("attachment", "c-1", "j-2")))
    assert both == Inputs(job=JOB, cv=CV)
    assert reader.reads[1:] == [("job", "j-2"), ("cv", "c-1")]


def test_one_bounded_structured_request_per_task() -> None:
    request = CV_REVIEW.request(Inputs(job=JOB, cv=CV))
    assert request.schema_name == "cv_review"
    user = request.messages[-1]["content"]
    assert JOB_SECTION in user
    assert CV_SECTION in user
    assert request.validate is not None
    snapshot = STRATEGY_SNAPSHOT.request(Inputs(job=JOB, cv=None))
    assert CV_SECTION not in snapshot.messages[-1]["content"]
    with pytest.raises(InvalidArgument):
        CV_REVIEW.request(Inputs(job=JOB, cv=None))  # a review needs the CV


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
