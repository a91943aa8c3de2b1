"""A third task type, registered in a temporary registry, reaches every reader.

This is the recipe of docs/tasks.md made executable: a ``TaskType`` entry and
its prompt instructions are all it takes for the gateway to route it (with its
OpenAPI entry), the page to know it, the worker to have a handler whose
request carries its answer schema, the development model to answer that
schema, and the notification to name it. Nothing below edits another module.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from datetime import timedelta
from typing import Any

import httpx
import pytest
from starlette.routing import Route

from durable_ops.ai_worker.handlers import handlers_for
from durable_ops.ai_worker.prompts import INSTRUCTIONS
from durable_ops.dev_model import create_app as create_dev_model
from durable_ops.gateway.ai import analysis_module
from durable_ops.gateway.web import Renderer
from durable_ops.model import answers, subjects, tasks
from durable_ops.model.notifications import wording
from durable_ops.model.states import OperationState
from durable_ops.settings import Settings
from tests.support.prompts import cv_text, job_text

COVER_LETTER = tasks.TaskType(
    name="cover.letter",
    label="Cover letter",
    action="Draft cover letter",
    subject=subjects.JOB,
    context=subjects.CV,
    answer=tasks.answer(
        {
            "match_score": tasks.score("Match"),
            "letter": tasks.text(2_000),
            "talking_points": tasks.items("Talking points", 5, 200),
        }
    ),
    answer_tokens=tasks.AnswerTokens(alone=700, with_context=900),
    priority=3,
    time_budget=timedelta(minutes=10),
    max_attempts=2,
    retry_delay_seconds=10,
    external_allowed=False,
)
REGISTRY = tasks.TASKS.with_task(COVER_LETTER)
PROMPTS = {**INSTRUCTIONS, COVER_LETTER.name: "Draft a cover letter for the posting."}
JOB = job_text("Data Engineer", "Globex", "Python, Spark and Kafka.")
CV = cv_text("Built Spark pipelines in Python for five years.")


def test_the_registry_derives_every_spelling() -> None:
    assert COVER_LETTER.url_segment == "cover-letter"
    assert COVER_LETTER.schema_name == "cover_letter"
    assert COVER_LETTER.path == "/api/jobs/{id}/cover-letter"
    assert COVER_LETTER.context is not None
    assert COVER_LETTER.context.reference_field == "attachment_id"
    assert REGISTRY.names() == ("strategy.snapshot", "cv.review", "cover.letter")


def test_the_gateway_routes_it_with_its_openapi_entry() -> None:
    module = analysis_module(REGISTRY)
    methods = {
        (route.path, method)
        for route in module.routes
        if isinstance(route, Route)
        for method in route.methods or ()
    }
    assert ("/api/jobs/{id}/cover-letter", "POST") in methods
    assert ("/api/jobs/{id}/cover-letter", "GET") in methods
    post = module.openapi_paths["/api/jobs/{id}/cover-letter"]["post"]
    assert post["requestBody"]["content"]["application/json"]["schema"]["properties"] == {
        "attachment_id": {"type": "string"},
        "not_before": {"type": "string", "format": "date-time"},
    }


def test_the_page_knows_it() -> None:
    page = Renderer((), REGISTRY).render(Settings(), title="t", module="jobs", user="alice")
    start = page.index('<script type="application/json" id="ops-tasks">') + len(
        '<script type="application/json" id="ops-tasks">'
    )
    rendered = json.loads(page[start : page.index("</script>", start)])
    (entry,) = [task for task in rendered if task["name"] == "cover.letter"]
    assert entry["label"] == "Cover letter"
    assert entry["action"] == "Draft cover letter"
    assert entry["path"] == "/api/jobs/{id}/cover-letter"
    assert entry["answer"]["properties"]["match_score"]["title"] == "Match"


def test_the_worker_has_a_handler_and_the_dev_model_answers_its_schema() -> None:
    handler = handlers_for(REGISTRY, PROMPTS)[COVER_LETTER.name]
    refs = handler.refs_for("job", "job-1", "cv-1")
    assert [(ref.kind, ref.id) for ref in refs] == [(subjects.JOB, "job-1"), (subjects.CV, "cv-1")]
    request = handler.request([JOB, CV])
    assert (
        "match_score (integer 0-100), letter (at most 2000 characters)"
        in request.messages[0]["content"]
    )
    assert request.schema_name == "cover_letter"
    assert request.schema == COVER_LETTER.answer
    assert request.expected_tokens == 900  # with the CV, its context
    body = {
        "model": "dev-heuristic",
        "messages": request.messages,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": request.schema_name, "strict": True, "schema": request.schema},
        },
    }
    content = asyncio.run(_complete(body))
    answer = answers.validate(COVER_LETTER.answer, json.loads(content))
    assert 0 < answer["match_score"] <= 100  # the CV mentions the posting's terms
    assert "Spark" in answer["talking_points"] or "spark" in answer["talking_points"]
    assert json.loads(handler.note_body(answer)) == answer


def test_its_answer_budget_must_be_positive() -> None:
    with pytest.raises(ValueError, match="answer_tokens"):
        dataclasses.replace(COVER_LETTER, answer_tokens=tasks.AnswerTokens(alone=0))
    with pytest.raises(ValueError, match="answer_tokens"):
        tasks.AnswerTokens(alone=300, with_context=-1)


def test_without_instructions_there_is_no_handler_to_claim_it() -> None:
    assert COVER_LETTER.name not in handlers_for(REGISTRY, INSTRUCTIONS)


def test_its_notification_names_it() -> None:
    text = wording(COVER_LETTER.name, OperationState.SUCCEEDED, REGISTRY)
    assert text.title == "Cover letter is ready"


async def _complete(body: dict[str, Any]) -> str:
    transport = httpx.ASGITransport(create_dev_model())
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        response = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    content: str = response.json()["choices"][0]["message"]["content"]
    return content
