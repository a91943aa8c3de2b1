"""Progress that moves evenly to the end (issue 39): the development model's streamed
answers, read by the worker's inference client, against the expected size the task
gives for its inputs (``TaskType.answer_tokens``, with or without the context).

The sizes were measured on these inputs: if a test here fails after the development
model or a schema changed, measure again (count ``dev_model.stream.pieces`` of the
answers) and set ``answer_tokens`` a little under the shortest usual answer.
"""

from __future__ import annotations

import asyncio
import itertools

import httpx
import pytest

from durable_ops.ai_worker.inference import ModelClient
from durable_ops.ai_worker.prompts import SubjectText
from durable_ops.dev_model import create_app
from durable_ops.model import tasks
from durable_ops.model.routing import Route
from tests.integration.test_dev_model import JOB, STRONG_CV, WEAK_CV
from tests.support import ai_stack
from tests.support.prompts import build_request, cv_text, job_text
from tests.support.workspace_client import CV_TEXT, JOB_TEXT
from tests.unit.test_dev_model_heuristic import (
    JOB_AD,
    JOB_COMPANY,
    JOB_TITLE,
    MATCHING_CV,
    PASTRY_CHEF_CV,
)

REACHED_BEFORE_DONE = 85  # the bar: no jump from half way to done
MAX_STEP = 2  # percentage points between two reports: it moves, it does not leap

JOBS = {
    "data engineer": JOB,
    "the browser tests' job": job_text("Platform engineer", "Acme", JOB_TEXT),
    "a long posting": job_text(JOB_TITLE, JOB_COMPANY, JOB_AD),
    "the AI stack's job": job_text(**ai_stack.JOB),
}
CVS: dict[str, SubjectText | None] = {
    "a strong CV": STRONG_CV,
    "an unrelated CV": WEAK_CV,
    "the browser tests' CV": cv_text(CV_TEXT),
    "a matching CV": cv_text(MATCHING_CV),
    "a pastry chef's CV": cv_text(PASTRY_CHEF_CV),
    "the AI stack's CV": cv_text(ai_stack.CV_TEXT),
    "no CV": None,
}
CASES = [
    pytest.param(task, job, cv, id=f"{task.name}, {job_name}, {cv_name}")
    for task, (job_name, job), (cv_name, cv) in itertools.product(
        (tasks.STRATEGY_SNAPSHOT, tasks.CV_REVIEW), JOBS.items(), CVS.items()
    )
    if task is tasks.STRATEGY_SNAPSHOT or cv is not None
] + [
    pytest.param(tasks.CV_REVIEW, None, cv, id=f"cv.review, no posting, {cv_name}")
    for cv_name, cv in CVS.items()
    if cv is not None
]


async def _progress(request_texts: list[SubjectText], task: tasks.TaskType) -> list[int]:
    reported: list[int] = []
    transport = httpx.ASGITransport(create_app())
    async with ModelClient(
        "http://127.0.0.1/v1", "dev-heuristic", route=Route.LOCAL, transport=transport
    ) as client:
        await client.complete(build_request(task.name, *request_texts), on_progress=reported.append)
    return reported


@pytest.mark.parametrize(("task", "job", "cv"), CASES)
def test_the_development_models_progress_climbs_evenly_to_near_the_end(
    task: tasks.TaskType, job: SubjectText | None, cv: SubjectText | None
) -> None:
    texts = [text for text in (job, cv) if text is not None]
    reported = asyncio.run(_progress(texts, task))
    assert reported == sorted(set(reported)), "it never goes back or repeats"
    assert reported[0] >= 1
    assert reported[-1] <= 99, "100 is for completion alone"
    assert reported[-1] >= REACHED_BEFORE_DONE, f"the last value before done: {reported[-1]}"
    steps = [later - earlier for earlier, later in itertools.pairwise([0, *reported])]
    assert max(steps) <= MAX_STEP, f"it leapt by {max(steps)}"
