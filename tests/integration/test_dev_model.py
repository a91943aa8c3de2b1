"""The development model: OpenAI-compatible surface, deterministic heuristic, fault drills."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette

from durable_ops.ai_worker.inference import ModelClient
from durable_ops.ai_worker.prompts import SubjectText
from durable_ops.dev_model import create_app, parse_bind
from durable_ops.dev_model.heuristic import (
    HEURISTIC_NOTE,
    Inputs,
    cv_review,
    key_terms,
    parse_inputs,
    strategy_snapshot,
    words,
)
from durable_ops.dev_model.stream import READ_BATCH, pieces, reading_seconds
from durable_ops.dev_model.stream import pieces as pieces_of
from durable_ops.model import answers, tasks
from durable_ops.model.routing import Route
from durable_ops.settings import Settings
from durable_ops.up import UP_DEV_MODEL_SECONDS, _stack_env
from tests.support.ai_stack import ModelServer
from tests.support.dev_model import serving
from tests.support.ports import free_port
from tests.support.prompts import (
    answer_schema,
    build_messages,
    build_request,
    cv_text,
    job_text,
    validate_answer,
)
from tests.unit.test_dev_model_heuristic import (
    JOB_AD,
    JOB_COMPANY,
    JOB_TITLE,
    MATCHING_CV,
    PASTRY_CHEF_CV,
)

STRATEGY_SNAPSHOT = tasks.STRATEGY_SNAPSHOT.name
CV_REVIEW = tasks.CV_REVIEW.name

JOB = job_text(
    title="Senior Data Engineer",
    company="Globex Analytics",
    description=(
        "We are hiring a data engineer. Requirements: Python, Spark, Airflow, "
        "Kafka, SQL and dbt. Experience with Snowflake and Terraform is a plus. "
        "You will build Spark pipelines and Airflow DAGs in Python."
    ),
)
STRONG_CV = cv_text(
    text="""Jane Doe
jane@example.com · +49 30 1234 5678

## Summary
Data engineer building batch and streaming platforms.

## Experience
- Built Spark and Kafka pipelines processing 2TB per day in Python
- Cut Airflow DAG runtime by 45% through SQL and dbt model tuning
- Migrated 120 tables to Snowflake, saving $40k a year
- Mentored 4 engineers on data modelling

## Education
MSc Computer Science, 2016

## Skills
Python, SQL, Spark, Airflow, Kafka, dbt, Snowflake, Terraform
"""
)
WEAK_CV = cv_text(text="I like gardening and painting watercolours on weekends.")


def chat_body(
    task_type: str, job: SubjectText | None, cv: SubjectText | None, **extra: Any
) -> dict[str, Any]:
    name, schema = answer_schema(task_type)
    body = {
        "model": "dev-heuristic",
        "messages": build_messages(task_type, job, cv),
        "temperature": 0,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": name, "strict": True, "schema": schema},
        },
    }
    body.update(extra)
    return body


async def _post(app: Starlette, path: str, body: Any = None, **kwargs: Any) -> httpx.Response:
    transport = httpx.ASGITransport(app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        if body is None and not kwargs:
            return await client.get(path)
        return await client.post(path, json=body, **kwargs)


def call(app: Starlette, path: str, body: Any = None, **kwargs: Any) -> httpx.Response:
    return asyncio.run(_post(app, path, body, **kwargs))


def answer(task_type: str, job: SubjectText | None, cv: SubjectText | None) -> dict[str, Any]:
    response = call(create_app(), "/v1/chat/completions", chat_body(task_type, job, cv))
    assert response.status_code == 200, response.text
    content = response.json()["choices"][0]["message"]["content"]
    return validate_answer(task_type, json.loads(content))


# --- the OpenAI surface -------------------------------------------------------


def test_models_lists_the_served_model() -> None:
    response = call(create_app(model="dev-x"), "/v1/models")
    assert response.status_code == 200
    assert response.json() == {
        "object": "list",
        "data": [{"id": "dev-x", "object": "model", "created": 0, "owned_by": "durable-ops"}],
    }


def test_completion_is_openai_shaped() -> None:
    response = call(
        create_app(), "/v1/chat/completions", chat_body(STRATEGY_SNAPSHOT, JOB, STRONG_CV)
    )
    assert response.status_code == 200
    completion = response.json()
    assert completion["id"].startswith("chatcmpl-")
    assert completion["object"] == "chat.completion"
    assert isinstance(completion["created"], int)
    assert completion["model"] == "dev-heuristic"
    (choice,) = completion["choices"]
    assert choice["index"] == 0
    assert choice["finish_reason"] == "stop"
    assert choice["message"]["role"] == "assistant"
    validate_answer(STRATEGY_SNAPSHOT, json.loads(choice["message"]["content"]))
    usage = completion["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > 0


def test_same_request_same_answer() -> None:
    body = chat_body(CV_REVIEW, JOB, STRONG_CV)
    first = call(create_app(), "/v1/chat/completions", body).json()
    second = call(create_app(), "/v1/chat/completions", body).json()
    assert first["id"] == second["id"]
    assert first["choices"] == second["choices"]


def test_text_content_parts_are_read() -> None:
    body = chat_body(CV_REVIEW, None, STRONG_CV)
    user = body["messages"][1]["content"]
    body["messages"][1]["content"] = [{"type": "text", "text": user}]
    response = call(create_app(), "/v1/chat/completions", body)
    assert response.status_code == 200
    assert answer(CV_REVIEW, None, STRONG_CV) == json.loads(content_of(response))


def test_schema_recognised_by_shape_when_the_name_differs() -> None:
    body = chat_body(CV_REVIEW, None, STRONG_CV)
    body["response_format"]["json_schema"]["name"] = "review"
    response = call(create_app(), "/v1/chat/completions", body)
    assert response.status_code == 200
    assert "overall_score" in json.loads(response.json()["choices"][0]["message"]["content"])


def test_answer_honours_tighter_limits_of_the_sent_schema() -> None:
    body = chat_body(STRATEGY_SNAPSHOT, JOB, STRONG_CV)
    schema = body["response_format"]["json_schema"]["schema"]
    schema["properties"]["summary"]["maxLength"] = 30
    schema["properties"]["strengths"]["maxItems"] = 2
    schema["properties"]["fit_score"]["anyOf"][0]["maximum"] = 10
    response = call(create_app(), "/v1/chat/completions", body)
    result = json.loads(response.json()["choices"][0]["message"]["content"])
    assert len(result["summary"]) == 30
    assert len(result["strengths"]) == 2
    assert result["fit_score"] == 10


def bad(body: Any, **changes: Any) -> Any:
    if isinstance(body, dict):
        body = {**body, **changes}
        for key in [key for key, value in changes.items() if value is None]:
            del body[key]
    return body


GOOD = chat_body(STRATEGY_SNAPSHOT, JOB, STRONG_CV)


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        (bad(GOOD, messages=None), 400, "messages"),
        (bad(GOOD, messages=[]), 400, "messages"),
        (bad(GOOD, messages=[{"role": "wizard", "content": "x"}]), 400, "messages[0].role"),
        (bad(GOOD, messages=[{"role": "user", "content": 7}]), 400, "messages[0].content"),
        (bad(GOOD, messages=[{"role": "system", "content": "x"}]), 400, "messages"),
        (bad(GOOD, response_format=None), 400, "response_format"),
        (bad(GOOD, response_format={"type": "json_object"}), 400, "response_format"),
        (
            bad(GOOD, response_format={"type": "json_schema", "json_schema": {"name": "x"}}),
            400,
            "response_format.json_schema",
        ),
        (
            bad(
                GOOD,
                response_format={
                    "type": "json_schema",
                    "json_schema": {"name": "poem", "schema": {"type": "object"}},
                },
            ),
            400,
            "response_format.json_schema",
        ),
        (bad(GOOD, stream="yes"), 400, "stream"),
        (bad(GOOD, return_progress="yes"), 400, "return_progress"),
        (bad(GOOD, model="gpt-9"), 404, "model"),
        ([1, 2], 400, None),
    ],
)
def test_bad_requests_get_openai_errors(body: Any, status: int, param: str | None) -> None:
    response = call(create_app(), "/v1/chat/completions", body)
    assert response.status_code == status
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert error["message"]


def test_body_that_is_not_json_or_too_large() -> None:
    app = create_app()
    broken = call(app, "/v1/chat/completions", content=b"{not json")
    assert broken.status_code == 400
    assert "JSON" in broken.json()["error"]["message"]
    huge = call(app, "/v1/chat/completions", content=b" " * ((1 << 20) + 1))
    assert huge.status_code == 413
    # Nested past the parser's depth (a 500 and a traceback, once).
    deep = b'{"messages":[{"role":"user","content":' + b"[" * 100_000 + b"]" * 100_000 + b"}]}"
    nested = call(app, "/v1/chat/completions", content=deep)
    assert nested.status_code == 400
    assert nested.json()["error"]["type"] == "invalid_request_error"


def test_schema_it_cannot_satisfy_is_refused() -> None:
    body = chat_body(STRATEGY_SNAPSHOT, JOB, STRONG_CV)
    schema = body["response_format"]["json_schema"]["schema"]
    schema["properties"]["mood"] = {"type": "string"}
    schema["required"].append("mood")
    response = call(create_app(), "/v1/chat/completions", body)
    assert response.status_code == 400


# --- the heuristic ----------------------------------------------------------------


def test_strategy_rewards_overlap_and_names_gaps() -> None:
    strong = answer(STRATEGY_SNAPSHOT, JOB, STRONG_CV)
    weak = answer(STRATEGY_SNAPSHOT, JOB, WEAK_CV)
    assert strong["fit_score"] >= 80
    assert weak["fit_score"] == 0
    assert any("'spark'" in item for item in strong["strengths"])
    assert weak["strengths"] == []
    assert any("'kafka'" in item for item in weak["gaps"])
    assert strong["next_steps"]
    assert "Senior Data Engineer" in strong["summary"]


def test_strategy_ignores_the_company_name_and_stopwords() -> None:
    result = answer(STRATEGY_SNAPSHOT, JOB, WEAK_CV)
    text = json.dumps(result).lower()
    assert "globex" not in text
    assert "'hiring'" not in text
    assert "'requirements'" not in text


def test_key_terms_leave_out_the_company_and_weight_the_title() -> None:
    inputs = Inputs(
        job_title="Rust Engineer",
        job_company="Globex Corp",
        job_text="Globex builds Python. Globex ships Python services. Rust too.",
    )
    terms = key_terms(inputs)
    assert [word for word, _ in terms.values()] == [
        "rust",  # twice, once in the title: 2 + 2
        "engineer",  # once, in the title: 1 + 2
        "python",
        "builds",
        "ships",
        "services",
    ]
    assert "globex" not in terms


def test_strategy_without_cv_is_not_scored() -> None:
    result = answer(STRATEGY_SNAPSHOT, JOB, None)
    assert result["fit_score"] is None  # the schema allows null: nothing was compared
    assert "Not scored" in result["summary"]
    assert "0/100" not in result["summary"]
    assert any("Attach a CV" in step for step in result["next_steps"])


REALISTIC_JOB = job_text(title=JOB_TITLE, company=JOB_COMPANY, description=JOB_AD)


def test_a_realistic_posting_through_the_workers_prompt() -> None:
    # The prompt the worker sends (sections, clipping) reaches the same scores.
    strong = answer(STRATEGY_SNAPSHOT, REALISTIC_JOB, cv_text(MATCHING_CV))
    unrelated = answer(STRATEGY_SNAPSHOT, REALISTIC_JOB, cv_text(PASTRY_CHEF_CV))
    assert strong["fit_score"] >= 70
    assert unrelated["fit_score"] <= 30
    gaps = " ".join(strong["gaps"] + unrelated["gaps"]).lower()
    for word in ("'days'", "'week'", "'weeks'", "'monday'", "'years'", "'experience'", "'design'"):
        assert word not in gaps


def test_every_answer_says_it_comes_from_a_heuristic() -> None:
    response = call(create_app(), "/v1/chat/completions", chat_body(CV_REVIEW, JOB, STRONG_CV))
    assert response.json()["model"] == "dev-heuristic"  # what the worker records as the model
    assert json.loads(content_of(response))["summary"].startswith(HEURISTIC_NOTE)
    for result in (answer(STRATEGY_SNAPSHOT, JOB, STRONG_CV), answer(STRATEGY_SNAPSHOT, JOB, None)):
        assert result["summary"].startswith(HEURISTIC_NOTE)


def nullable_score(body: dict[str, Any], field: str) -> dict[str, Any]:
    schema: dict[str, Any] = body["response_format"]["json_schema"]["schema"]
    spec = schema["properties"][field]
    if "anyOf" not in spec:  # the review's score is an integer in the product: make it nullable
        title = spec.pop("title")
        schema["properties"][field] = {"anyOf": [spec, {"type": "null"}], "title": title}
    return schema


@pytest.mark.parametrize("streamed", [False, True])
def test_nothing_to_score_is_null_where_the_sent_schema_allows_it(streamed: bool) -> None:
    body = chat_body(STRATEGY_SNAPSHOT, JOB, None, stream=streamed)
    schema = nullable_score(body, "fit_score")
    response = call(create_app(), "/v1/chat/completions", body)
    assert response.status_code == 200
    content = streamed_content(events_of(response)) if streamed else content_of(response)
    result = answers.validate(schema, json.loads(content))
    assert result["fit_score"] is None
    assert "Not scored" in result["summary"]

    scored = chat_body(STRATEGY_SNAPSHOT, JOB, STRONG_CV)
    nullable_score(scored, "fit_score")
    assert (
        json.loads(content_of(call(create_app(), "/v1/chat/completions", scored)))["fit_score"]
        >= 80
    )  # null only when nothing was scored


def test_a_review_of_a_cv_without_words_is_null_where_allowed() -> None:
    body = chat_body(CV_REVIEW, None, cv_text("2019 - 2024"))
    schema = nullable_score(body, "overall_score")
    result = json.loads(content_of(call(create_app(), "/v1/chat/completions", body)))
    assert answers.validate(schema, result)["overall_score"] is None
    product = answer(CV_REVIEW, None, cv_text("2019 - 2024"))  # the schema wants an integer
    assert product["overall_score"] == 0
    assert "Not scored" in product["summary"]


def test_cv_review_scores_structure() -> None:
    strong = answer(CV_REVIEW, None, STRONG_CV)
    weak = answer(CV_REVIEW, None, WEAK_CV)
    assert strong["overall_score"] > weak["overall_score"]
    assert any("Experience section" in item for item in strong["strengths"])
    assert any("Quantifies achievements" in item for item in strong["strengths"])
    assert any("Add a Skills section" in item for item in weak["improvements"])
    no_headings = answer(CV_REVIEW, None, cv_text("Worked on data pipelines for five years."))
    assert "Add an Experience section with its own heading." in no_headings["improvements"]
    assert "Add an Education section with its own heading." in no_headings["improvements"]
    assert any("Quantify achievements" in item for item in weak["improvements"])
    assert strong["keywords_missing"] == weak["keywords_missing"] == []


def test_cv_review_against_a_job_lists_missing_keywords() -> None:
    python_only = cv_text(text="## Skills\n- Python\n- SQL")
    result = answer(CV_REVIEW, JOB, python_only)
    assert "spark" in result["keywords_missing"]
    assert "python" not in result["keywords_missing"]
    assert "against the posting" in result["summary"].lower()


def test_sections_round_trip_through_the_prompt() -> None:
    user = build_messages(STRATEGY_SNAPSHOT, JOB, STRONG_CV)[1]["content"]
    inputs = parse_inputs(user, unsectioned="job")
    assert inputs.job_title == JOB.fields["title"]
    assert inputs.job_company == JOB.fields["company"]
    assert inputs.job_text == JOB.fields["description"]
    assert inputs.cv_text == STRONG_CV.fields["text"].rstrip("\n")


def test_unsectioned_text_is_the_main_input() -> None:
    assert parse_inputs("just a CV", unsectioned="cv") == Inputs(cv_text="just a CV")
    assert parse_inputs("just a job", unsectioned="job") == Inputs(job_text="just a job")


def test_words_keep_technical_terms() -> None:
    assert words("We use C++, C#, Node.js and CI/CD in 2024 with a team.") == [
        "c++",
        "c#",
        "node.js",
        "ci/cd",
    ]


free_text = st.text(st.characters(codec="utf-8"), max_size=400)


@settings(max_examples=60)
@given(free_text, free_text, free_text, st.one_of(st.none(), free_text))
def test_any_input_gives_a_valid_answer(
    title: str, description: str, cv: str, review_job: str | None
) -> None:
    job = job_text(title=title, company="Acme", description=description)
    for task_type, job_input, cv_input in (
        (STRATEGY_SNAPSHOT, job, cv_text(cv)),
        (STRATEGY_SNAPSHOT, job, None),
        (CV_REVIEW, None if review_job is None else job_text("", "", review_job), cv_text(cv)),
    ):
        user = build_messages(task_type, job_input, cv_input)[1]["content"]
        if task_type == STRATEGY_SNAPSHOT:
            result = strategy_snapshot(parse_inputs(user, unsectioned="job"))
        else:
            result = cv_review(parse_inputs(user, unsectioned="cv"))
        validate_answer(task_type, result)


# --- the streamed form ------------------------------------------------------------


def events_of(response: httpx.Response) -> list[Any]:
    """The ``data:`` payloads of an event-stream body, the chunks parsed."""
    assert response.headers["content-type"].startswith("text/event-stream")
    blocks = response.text.split("\n\n")
    assert blocks[-1] == ""  # every event ends with its blank line
    payloads = []
    for block in blocks[:-1]:
        assert block.startswith("data: ")
        payload = block.removeprefix("data: ")
        payloads.append(payload if payload == "[DONE]" else json.loads(payload))
    return payloads


def streamed_content(events: list[Any]) -> str:
    return "".join(
        event["choices"][0]["delta"].get("content", "")
        for event in events
        if event != "[DONE]" and event["choices"]  # the usage chunk has none
    )


@pytest.mark.parametrize(
    ("task_type", "job", "cv"),
    [
        (STRATEGY_SNAPSHOT, JOB, STRONG_CV),
        (STRATEGY_SNAPSHOT, JOB, None),
        (CV_REVIEW, JOB, WEAK_CV),
    ],
)
def test_streamed_chunks_rejoin_to_the_whole_answer(
    task_type: str, job: SubjectText | None, cv: SubjectText | None
) -> None:
    body = chat_body(task_type, job, cv)
    whole = call(create_app(), "/v1/chat/completions", body).json()
    asked = {**body, "stream": True, "stream_options": {"include_usage": True}}
    events = events_of(call(create_app(), "/v1/chat/completions", asked))

    first, *pieces, last, used, done = events
    assert done == "[DONE]"
    assert first["choices"] == [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]
    assert last["choices"] == [{"index": 0, "delta": {}, "finish_reason": "stop"}]
    assert used["choices"] == []  # as llama-server and OpenAI send the usage
    assert first["id"].startswith("chatcmpl-")
    for event in events[:-1]:
        assert event["object"] == "chat.completion.chunk"
        assert (event["id"], event["model"]) == (first["id"], "dev-heuristic")
    contents = [piece["choices"][0]["delta"]["content"] for piece in pieces]
    assert all(contents)
    assert max(len(content.strip()) for content in contents) <= 6  # token-sized
    assert streamed_content(events) == whole["choices"][0]["message"]["content"]
    # Honest counts, the same in either form: the answer's are the chunks with content it
    # sent, the prompt's every message cut into the same pieces.
    prompt = sum(len(pieces_of(message["content"])) for message in body["messages"])
    assert (
        used["usage"]
        == whole["usage"]
        == {
            "prompt_tokens": prompt,
            "completion_tokens": len(pieces),
            "total_tokens": prompt + len(pieces),
        }
    )
    assert used["timings"]["predicted_n"] == len(pieces)
    assert used["timings"]["prompt_n"] == prompt
    assert used["timings"]["predicted_ms"] >= 0
    assert "usage" not in last  # only when asked for, as llama-server


def test_a_stream_not_asking_for_usage_ends_with_timings_alone() -> None:
    body = {**chat_body(STRATEGY_SNAPSHOT, JOB, STRONG_CV), "stream": True}
    *_, last, done = events_of(call(create_app(), "/v1/chat/completions", body))
    assert done == "[DONE]"
    assert last["choices"][0]["finish_reason"] == "stop"
    assert "usage" not in last
    assert set(last["timings"]) == {"prompt_n", "prompt_ms", "predicted_n", "predicted_ms"}


@given(st.text(st.characters(codec="utf-8"), max_size=300) | st.text(' \n\t{}":,a1_é'))
def test_pieces_join_to_the_exact_text(text: str) -> None:
    parts = pieces(text)
    assert "".join(parts) == text
    assert all(parts)
    assert all(len(part) <= 7 for part in parts if part.strip())


@pytest.fixture
def paced_model() -> Iterator[ModelServer]:
    model = ModelServer(delay_seconds=0.5)
    yield model
    model.stop()


async def _timed_stream(url: str, body: dict[str, Any]) -> tuple[float, float, list[Any]]:
    """(seconds to the first content chunk, seconds to the end, the events)."""
    started = time.monotonic()
    first_content = None
    raw = b""
    async with (
        httpx.AsyncClient() as client,
        client.stream("POST", f"{url}/chat/completions", json=body) as response,
    ):
        async for data in response.aiter_bytes():
            raw += data
            if first_content is None and b'"content"' in raw:
                first_content = time.monotonic() - started
        ended = time.monotonic() - started
        events = events_of(httpx.Response(200, headers=response.headers, content=raw))
    assert first_content is not None
    return first_content, ended, events


def test_the_pace_spreads_over_the_chunks(paced_model: ModelServer) -> None:
    body = {**GOOD, "stream": True}
    first_content, ended, events = asyncio.run(_timed_stream(paced_model.url, body))
    # The first piece at once and the last when the completion's time is up: most of
    # the pace lies between them, however slow a loaded machine makes the start.
    assert ended - first_content >= 0.35
    assert 0.45 <= ended < 3
    assert len(events) > 100

    started = time.monotonic()
    whole = call(paced_model.app, "/v1/chat/completions", GOOD)  # the whole: waited, then sent
    assert time.monotonic() - started >= 0.5
    assert content_of(whole) == streamed_content(events)


def test_asked_the_stream_first_reports_the_prompts_reading_as_llama_server_does() -> None:
    body = {**GOOD, "stream": True, "stream_options": {"include_usage": True}}
    plain = events_of(call(create_app(), "/v1/chat/completions", body))
    asked = events_of(call(create_app(), "/v1/chat/completions", {**body, "return_progress": True}))

    prompt = sum(len(pieces_of(message["content"])) for message in GOOD["messages"])
    reports = [event for event in asked if event != "[DONE]" and "prompt_progress" in event]
    assert asked[: len(reports)] == reports  # all of them before the answer
    for report in reports:  # llama-server's shape: the assistant's role, no content
        assert report["choices"] == [
            {"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}
        ]
        assert set(report["prompt_progress"]) == {"total", "cache", "processed", "time_ms"}
        assert (report["prompt_progress"]["total"], report["prompt_progress"]["cache"]) == (
            prompt,
            0,
        )
    processed = [report["prompt_progress"]["processed"] for report in reports]
    assert processed[0] == 0
    assert processed[-1] == prompt
    assert all(
        0 < later - earlier <= READ_BATCH for earlier, later in itertools.pairwise(processed)
    )
    # Otherwise the same stream: the same answer in the same pieces, the same counts.
    rest = asked[len(reports) :]

    def unmeasured(events: list[Any]) -> list[Any]:  # without what differs per request
        return [
            {k: v for k, v in e.items() if k not in ("id", "created", "timings")} for e in events
        ]

    assert unmeasured(rest[:-1]) == unmeasured(plain[:-1])
    assert rest[-2]["usage"] == plain[-2]["usage"]
    assert "prompt_progress" not in json.dumps(plain)  # only when asked, as llama-server


def test_the_reading_takes_its_part_of_the_pace(paced_model: ModelServer) -> None:
    body = {**GOOD, "stream": True, "return_progress": True}
    first_content, ended, events = asyncio.run(_timed_stream(paced_model.url, body))
    answer = [
        event
        for event in events
        if event != "[DONE]" and event["choices"][0]["delta"].get("content")
    ]
    prompt = events[0]["prompt_progress"]["total"]
    reading = reading_seconds(prompt, len(answer), 0.5)
    assert 0.05 < reading < 0.45  # a prompt a few times the answer's size, read 5 times faster
    assert first_content >= reading - 0.02  # the answer starts once the prompt was read
    assert 0.45 <= ended < 3  # the whole completion keeps its pace
    timings = events[-2]["timings"]
    assert timings["prompt_ms"] >= (reading - 0.02) * 1000  # the reading is the prompt's time
    assert timings["prompt_ms"] + timings["predicted_ms"] <= ended * 1000


# --- fault drills ---------------------------------------------------------------


def content_of(response: httpx.Response) -> str:
    content: str = response.json()["choices"][0]["message"]["content"]
    return content


def test_fail_modes() -> None:
    invalid = call(create_app(fail_mode="invalid_json"), "/v1/chat/completions", GOOD)
    assert invalid.status_code == 200
    with pytest.raises(ValueError, match="Expecting value"):
        json.loads(content_of(invalid))

    mismatch = call(create_app(fail_mode="schema_mismatch"), "/v1/chat/completions", GOOD)
    assert "fit_score" not in json.loads(content_of(mismatch))

    failed = call(create_app(fail_mode="500"), "/v1/chat/completions", GOOD)
    assert failed.status_code == 500
    assert failed.json()["error"]["type"] == "server_error"

    busy = call(create_app(fail_mode="429"), "/v1/chat/completions", GOOD)
    assert busy.status_code == 429
    assert busy.headers["retry-after"] == "1"


def test_fail_modes_streamed() -> None:
    streamed = {**GOOD, "stream": True}
    invalid = call(create_app(fail_mode="invalid_json"), "/v1/chat/completions", streamed)
    with pytest.raises(ValueError, match="Expecting value"):
        json.loads(streamed_content(events_of(invalid)))

    mismatch = call(create_app(fail_mode="schema_mismatch"), "/v1/chat/completions", streamed)
    assert json.loads(streamed_content(events_of(mismatch))) == {"verdict": "fine"}

    # An error status is an error status: JSON, and no stream begun.
    failed = call(create_app(fail_mode="500"), "/v1/chat/completions", streamed)
    assert failed.status_code == 500
    assert failed.headers["content-type"] == "application/json"
    assert failed.json()["error"]["type"] == "server_error"
    busy = call(create_app(fail_mode="429", delay_seconds=0.2), "/v1/chat/completions", streamed)
    assert busy.status_code == 429
    assert busy.headers["retry-after"] == "1"


def test_slow_streams_its_answer_over_a_minute() -> None:
    model = ModelServer(fail_mode="slow")

    async def read_briefly() -> tuple[bytes, bool]:
        raw, finished = b"", False
        async with (
            httpx.AsyncClient() as client,
            client.stream(
                "POST", f"{model.url}/chat/completions", json={**GOOD, "stream": True}
            ) as response,
        ):
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1):
                    async for data in response.aiter_bytes():
                        raw += data
                    finished = True
        return raw, finished

    try:
        raw, finished = asyncio.run(read_briefly())
    finally:
        model.stop()
    assert not finished
    assert b'"content"' in raw  # under way, one piece after the other
    assert raw.count(b'"content"') < 20


def test_delay_applies_before_answering() -> None:
    started = time.monotonic()
    response = call(create_app(fail_mode="slow", delay_seconds=0.3), "/v1/chat/completions", GOOD)
    assert response.status_code == 200
    assert time.monotonic() - started >= 0.3


def test_config_can_change_while_serving() -> None:
    app = create_app(fail_mode="500")
    assert call(app, "/v1/chat/completions", GOOD).status_code == 500
    app.state.config.fail_mode = None
    assert call(app, "/v1/chat/completions", GOOD).status_code == 200


def test_factory_rejects_unknown_knobs() -> None:
    with pytest.raises(ValueError, match="fail_mode"):
        create_app(fail_mode="explode")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="delay"):
        create_app(delay_seconds=-1)


# --- serving --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bind", "expected"),
    [
        ("127.0.0.1:8090", ("127.0.0.1", 8090)),
        ("localhost:0", ("localhost", 0)),
        ("[::1]:8090", ("::1", 8090)),
    ],
)
def test_parse_bind(bind: str, expected: tuple[str, int]) -> None:
    assert parse_bind(bind) == expected


@pytest.mark.parametrize(
    "bind", ["8090", ":8090", "127.0.0.1:", "127.0.0.1:http", "::1:80", "h:70000"]
)
def test_parse_bind_rejects(bind: str) -> None:
    with pytest.raises(ValueError, match=r"bind|port|IPv6"):
        parse_bind(bind)


def test_run_serves_on_the_bind_address() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code = f"from durable_ops.dev_model import run; run('127.0.0.1:{port}')"
    process = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                response = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=1)
                break
            except httpx.TransportError:
                assert process.poll() is None, "dev model exited"
                assert time.monotonic() < deadline, "dev model did not come up"
                time.sleep(0.05)
        assert response.json()["data"][0]["id"] == "dev-heuristic"

        async def structured() -> dict[str, Any]:
            base = f"http://127.0.0.1:{port}/v1"
            async with ModelClient(base, "dev-heuristic", route=Route.LOCAL) as client:
                return (await client.complete(build_request(CV_REVIEW, JOB, STRONG_CV))).answer

        assert asyncio.run(structured())["overall_score"] > 0
    finally:
        process.terminate()
        # uvicorn shuts down gracefully, then re-raises the signal it caught.
        assert process.wait(timeout=10) in (0, -signal.SIGTERM)


def test_opsctl_serve_dev_model_reads_its_pace(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "OPS_DEV_MODEL_BIND": f"127.0.0.1:{port}", "OPS_DEV_MODEL_SECONDS": "0.6"}
    command = [sys.executable, "-m", "durable_ops.cli", "serve", "dev-model"]
    process = subprocess.Popen(command, env=env, cwd=tmp_path)  # its var/ is not the checkout's
    try:
        url = serving(process, port)
        first_content, ended, _ = asyncio.run(_timed_stream(url, {**GOOD, "stream": True}))
        assert ended >= 0.55
        assert ended - first_content >= 0.4  # the first piece at once, not with the last
    finally:
        process.terminate()
        assert process.wait(timeout=10) in (0, -signal.SIGTERM)


def test_opsctl_serve_dev_model_says_where_it_serves_and_when_it_stops(tmp_path: Path) -> None:
    """It wrote no line at all, where every other process says its bind and its stop."""
    port = free_port()
    env = {**os.environ, "OPS_DEV_MODEL_BIND": f"127.0.0.1:{port}", "OPS_LOG_JSON": "true"}
    command = [sys.executable, "-m", "durable_ops.cli", "serve", "dev-model"]
    process = subprocess.Popen(command, env=env, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    try:
        serving(process, port)
    finally:
        process.terminate()
        _, err = process.communicate(timeout=10)
    records = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    events = [record["event"] for record in records]
    assert events == ["dev_model_serving", "dev_model_stopping", "dev_model_stopped"], err
    said = records[0]
    assert (said["bind"], said["model"]) == (f"127.0.0.1:{port}", "dev-heuristic")
    assert said["process"] == "dev-model"


def test_opsctl_up_paces_the_dev_model_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPS_DEV_MODEL_SECONDS", raising=False)
    assert _stack_env(Settings())["OPS_DEV_MODEL_SECONDS"] == str(UP_DEV_MODEL_SECONDS)
    monkeypatch.setenv("OPS_DEV_MODEL_SECONDS", "0")
    assert "OPS_DEV_MODEL_SECONDS" not in _stack_env(Settings())  # the children inherit it
