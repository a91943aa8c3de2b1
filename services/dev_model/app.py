"""The development model: an OpenAI-compatible chat-completions server.

``GET /v1/models`` lists the one model; ``POST /v1/chat/completions`` answers
a structured request for a task's answer schema (``durable_ops.model.tasks``;
a known task recognised by ``json_schema.name``, else by its properties) with
the deterministic heuristic of ``heuristic`` (any other schema gets
``heuristic.schema_answer``), shaped to the limits of the schema that was sent.
Bad requests get 400 with an OpenAI-style error body.

It serves one model, ``DEFAULT_MODEL`` ("dev-heuristic") unless told another
name, and refuses requests for any other: the name the worker sends, and
records as the result's provenance, is the name a page sees. Every answer's
summary opens with ``heuristic.HEURISTIC_NOTE`` ("Built-in heuristic, not an
AI assessment."). When there is nothing to score (no CV; a posting or CV with
no word that counts) the score is null where the sent schema allows it
(``"type": ["integer", "null"]``), else 0 with a summary that begins "Not
scored".

With ``"stream": true`` the answer comes as server-sent ``chat.completion.chunk``
events in token-sized pieces (``stream``), else as one ``chat.completion``. Either
form reports honest ``usage`` (the prompt and the answer counted in those pieces:
the answer's count is the chunks it sent) and llama-server's ``timings`` (the times
it measured), the stream's when asked with ``stream_options.include_usage``.
A streamed answer asked with ``"return_progress": true`` first reports the
prompt's reading in llama-server's ``prompt_progress`` chunks (``stream``).
``delay_seconds`` is how long one completion takes: spread evenly over the
chunks of a streamed answer, waited before a whole one (``opsctl serve
dev-model`` reads it from ``OPS_DEV_MODEL_SECONDS``; ``opsctl up`` sets 4).

Fault drills: ``create_app(fail_mode=…, delay_seconds=…)`` stands up a model
that misbehaves in one chosen way, streamed or not: "500" and "429" answer an
error status (as JSON, after the delay, never a stream), "loading" the 503 that
llama-server answers every request with while it loads its model, "invalid_json" and
"schema_mismatch" answer content that is not JSON or not the schema, "slow"
takes 60 s unless a delay is given. ``app.state.config`` may be changed while
it runs, e.g. to let a "broken" model recover; a request reads it when it
arrives.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, get_args

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from durable_ops.dev_model import stream
from durable_ops.dev_model.heuristic import (
    Inputs,
    Score,
    Section,
    cv_review,
    parse_inputs,
    schema_answer,
    strategy_snapshot,
)
from durable_ops.dev_model.schema import allows_null, bounds_of, kind_of
from durable_ops.model import answers
from durable_ops.model.tasks import CV_REVIEW, STRATEGY_SNAPSHOT

DEFAULT_MODEL = "dev-heuristic"
MAX_REQUEST_BYTES = 1 << 20
SLOW_DEFAULT_SECONDS = 60.0

FailMode = Literal["invalid_json", "schema_mismatch", "500", "429", "loading", "slow"]
FAIL_MODES: tuple[str, ...] = get_args(FailMode)


@dataclass
class DevModelConfig:
    model: str = DEFAULT_MODEL
    fail_mode: FailMode | None = None
    delay_seconds: float = 0.0  # how long one completion takes; "slow" alone means 60 s


@dataclass(frozen=True)
class _Answerer:
    answer: Callable[[Inputs, Score], dict[str, Any]]  # (inputs, the score when not scored)
    unsectioned: Section  # which input a prompt without sections is
    score_field: str

    def unscored(self, schema: dict[str, Any]) -> Score:
        """Null where the sent schema lets the score be null, else 0 (the summary then
        says "Not scored"): the schema, not this model, decides what an answer may hold."""
        properties = schema.get("properties")
        spec = properties.get(self.score_field) if isinstance(properties, dict) else None
        return None if isinstance(spec, dict) and allows_null(spec) else 0


_ANSWERERS: dict[str, _Answerer] = {
    STRATEGY_SNAPSHOT.schema_name: _Answerer(strategy_snapshot, "job", "fit_score"),
    CV_REVIEW.schema_name: _Answerer(cv_review, "cv", "overall_score"),
}
# A hand-written request may name its schema anything: the score field tells the task.
_SHAPES = {"fit_score": STRATEGY_SNAPSHOT.schema_name, "overall_score": CV_REVIEW.schema_name}


class BadRequest(Exception):
    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        status_code: int = 400,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.status_code = status_code
        self.code = code


def _error(
    message: str,
    status_code: int,
    *,
    error_type: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body = {"error": {"message": message, "type": error_type, "param": param, "code": code}}
    return JSONResponse(body, status_code=status_code, headers=headers)


async def _read_body(request: Request) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_REQUEST_BYTES:
            raise BadRequest("request body larger than 1 MiB", status_code=413)
        chunks.append(chunk)
    return b"".join(chunks)


def _is_text_part(part: object) -> bool:
    return (
        isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
    )


def _text_of(message: object, index: int) -> tuple[str, str]:
    param = f"messages[{index}]"
    if not isinstance(message, dict):
        raise BadRequest("each message must be an object", param=param)
    role, content = message.get("role"), message.get("content")
    if role not in {"system", "developer", "user", "assistant"}:
        raise BadRequest("unknown message role", param=f"{param}.role")
    if isinstance(content, list) and all(_is_text_part(part) for part in content):
        content = "\n".join(part["text"] for part in content)
    if not isinstance(content, str):
        raise BadRequest("message content must be text", param=f"{param}.content")
    return role, content


def _schema_of(body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    response_format = body.get("response_format")
    if not isinstance(response_format, dict) or response_format.get("type") != "json_schema":
        raise BadRequest(
            "this model answers only response_format type json_schema",
            param="response_format",
        )
    spec = response_format.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, dict) else None
    if not isinstance(spec, dict) or not isinstance(schema, dict):
        raise BadRequest(
            "response_format.json_schema.schema must be an object",
            param="response_format.json_schema",
        )
    name = spec.get("name")
    if name in _ANSWERERS:
        return str(name), schema
    properties = schema.get("properties")
    if not isinstance(properties, dict) or schema.get("type") != "object":
        raise BadRequest(
            "schema must describe an object answer", param="response_format.json_schema"
        )
    for key, task in _SHAPES.items():
        if key in properties:
            return task, schema
    return str(name or ""), schema


def conform(value: Any, schema: dict[str, Any]) -> Any:
    """``value`` cut to the limits of ``schema`` (items, lengths, ranges, properties)."""
    if value is None and allows_null(schema):
        return None
    kind = kind_of(schema)
    schema = dict(bounds_of(schema))
    if kind == "object":
        properties = schema.get("properties", {})
        if not isinstance(value, dict) or not isinstance(properties, dict):
            raise BadRequest("schema does not describe this task's answer")
        unknown = [name for name in schema.get("required", []) if name not in value]
        if unknown:
            raise BadRequest(f"schema requires properties this model cannot give: {unknown}")
        return {
            name: conform(value[name], sub_schema)
            for name, sub_schema in properties.items()
            if name in value and isinstance(sub_schema, dict)
        }
    if kind == "array" and isinstance(value, list):
        items = schema.get("items", {})
        limit = schema.get("maxItems", len(value))
        return [conform(item, items) for item in value[:limit]]
    if kind == "string" and isinstance(value, str):
        return value[: schema.get("maxLength", len(value))]
    if kind == "integer" and isinstance(value, int):
        return max(schema.get("minimum", value), min(schema.get("maximum", value), value))
    raise BadRequest("schema does not describe this task's answer")


def _completion_id(body: bytes) -> str:
    # Derived from the request, so a repeated request is recognisably the same answer.
    return "chatcmpl-" + hashlib.sha256(body).hexdigest()[:24]


def _completion(
    model: str, body: bytes, content: str, prompt: int, prompt_ms: float, seconds: float
) -> dict[str, Any]:
    completion = len(stream.pieces(content))
    return {
        "id": _completion_id(body),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        # Counted in the pieces a streamed answer would have, so both forms agree.
        "usage": stream.usage(prompt, completion),
        "timings": stream.timings(prompt, prompt_ms, completion, seconds * 1000),
    }


@dataclass(frozen=True)
class _Ask:
    """A valid request: the task's schema name and schema, the user text, how to answer."""

    task: str
    schema: dict[str, Any]
    user_text: str
    prompt_tokens: int  # every message, counted in the answer's pieces
    streamed: bool  # "stream": true: answer in chat.completion.chunk events
    include_usage: bool  # stream_options.include_usage: a streamed answer ends with its usage
    report_reading: bool  # return_progress: a streamed answer first reports the prompt's reading


def _parse(raw: bytes, model: str) -> _Ask:
    """The request in ``raw``, or ``BadRequest`` saying what is wrong with it."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):  # nested past the parser's depth: no request of ours
        raise BadRequest("request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    if body.get("model") not in (None, model):
        raise BadRequest(
            f"model not found; this server serves {model!r}",
            param="model",
            status_code=404,
            code="model_not_found",
        )
    streamed = body.get("stream", False)
    if not isinstance(streamed, bool):
        raise BadRequest("stream must be a boolean", param="stream")
    options = body.get("stream_options") or {}
    include_usage = options.get("include_usage", False) if isinstance(options, dict) else None
    if not isinstance(include_usage, bool):
        raise BadRequest("stream_options.include_usage must be a boolean", param="stream_options")
    report_reading = body.get("return_progress", False)
    if not isinstance(report_reading, bool):
        raise BadRequest("return_progress must be a boolean", param="return_progress")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty array", param="messages")
    texts = [_text_of(message, index) for index, message in enumerate(messages)]
    user_texts = [content for role, content in texts if role == "user"]
    if not user_texts:
        raise BadRequest("no user message", param="messages")
    task, schema = _schema_of(body)
    prompt = stream.prompt_tokens([content for _, content in texts])
    return _Ask(task, schema, user_texts[-1], prompt, streamed, include_usage, report_reading)


def _answer(ask: _Ask, fail_mode: FailMode | None) -> str:
    """The content of the answer: the heuristic's JSON, or what the drill asks for."""
    if fail_mode == "invalid_json":
        return "Sure! Here is the analysis you asked for"
    if fail_mode == "schema_mismatch":
        return json.dumps({"verdict": "fine"})
    answerer = _ANSWERERS.get(ask.task)
    if answerer is None:
        inputs = parse_inputs(ask.user_text, unsectioned="job")
        answer = conform(schema_answer(ask.schema, inputs), ask.schema)
    else:
        inputs = parse_inputs(ask.user_text, unsectioned=answerer.unsectioned)
        answer = conform(answerer.answer(inputs, answerer.unscored(ask.schema)), ask.schema)
    try:
        answers.validate(ask.schema, answer)
    except (ValueError, KeyError, TypeError) as exc:
        raise BadRequest(
            "schema uses constraints this model cannot honour",
            param="response_format.json_schema",
        ) from exc
    return json.dumps(answer, ensure_ascii=False)


def _drill_error(fail_mode: Literal["500", "429", "loading"]) -> JSONResponse:
    if fail_mode == "500":
        return _error("drill: the model failed", 500, error_type="server_error")
    if fail_mode == "loading":  # llama-server's own words (tools/server/server-http.cpp)
        return _error("Loading model", 503, error_type="unavailable_error")
    return _error(
        "drill: the model is busy",
        429,
        error_type="rate_limit_error",
        headers={"Retry-After": "1"},
    )


def create_app(
    *,
    model: str = DEFAULT_MODEL,
    fail_mode: FailMode | None = None,
    delay_seconds: float = 0.0,
) -> Starlette:
    if fail_mode is not None and fail_mode not in FAIL_MODES:
        raise ValueError(f"fail_mode must be one of {FAIL_MODES}")
    if delay_seconds < 0:
        raise ValueError("delay_seconds must not be negative")
    config = DevModelConfig(model=model, fail_mode=fail_mode, delay_seconds=delay_seconds)

    async def models(request: Request) -> JSONResponse:
        entry = {"id": config.model, "object": "model", "created": 0, "owned_by": "durable-ops"}
        return JSONResponse({"object": "list", "data": [entry]})

    async def chat_completions(request: Request) -> Response:
        try:
            raw = await _read_body(request)
            read_at = time.monotonic()
            ask = _parse(raw, config.model)
            fail_mode = config.fail_mode
            seconds = config.delay_seconds
            if fail_mode == "slow" and not seconds:
                seconds = SLOW_DEFAULT_SECONDS
            if fail_mode in ("500", "429", "loading"):
                await asyncio.sleep(seconds)
                return _drill_error(fail_mode)
            content = _answer(ask, fail_mode)
            prompt_ms = (time.monotonic() - read_at) * 1000
        except BadRequest as exc:
            return _error(exc.message, exc.status_code, param=exc.param, code=exc.code)
        if ask.streamed:
            completion = stream.Completion(_completion_id(raw), int(time.time()), config.model)
            events = stream.events(
                completion,
                content,
                ask.prompt_tokens,
                seconds,
                prompt_ms=prompt_ms,
                include_usage=ask.include_usage,
                report_reading=ask.report_reading,
            )
            return StreamingResponse(
                events,
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache"},
            )
        started = time.monotonic()
        await asyncio.sleep(seconds)
        spent = time.monotonic() - started
        return JSONResponse(
            _completion(config.model, raw, content, ask.prompt_tokens, prompt_ms, spent)
        )

    app = Starlette(
        routes=[
            Route("/v1/models", models, methods=["GET"]),
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        ]
    )
    app.state.config = config
    return app
