"""The inference client and router against the development model and scripted servers."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, MutableMapping
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import uvicorn
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import REGISTRY
from starlette import routing
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from structlog.testing import capture_logs

from durable_ops.ai_worker import inference
from durable_ops.ai_worker.inference import (
    ExternalRouteNotPermitted,
    InferenceError,
    InferenceRequest,
    InvalidModelOutput,
    LocalRouteUnavailable,
    ModelClient,
    ModelConnectionError,
    ModelRateLimited,
    ModelRequestRejected,
    ModelServerError,
    ModelTimeout,
    ModelUnavailable,
    Provenance,
    Router,
    provider_from_url,
)
from durable_ops.ai_worker.inference.errors import ModelUnreachable
from durable_ops.ai_worker.inference.response_format import REFUSAL_BODY_BYTES, ResponseFormat
from durable_ops.ai_worker.inference.router import CIRCUIT_POLL_SECONDS
from durable_ops.ai_worker.inference.sse import Event, EventDecoder, MalformedStream
from durable_ops.dev_model import FailMode, create_app
from durable_ops.dev_model import stream as dev_stream
from durable_ops.model import tasks
from durable_ops.model.bounds import MODEL_MS_MAX
from durable_ops.model.circuit import CircuitBreaker, CircuitState
from durable_ops.model.progress import DEFAULT_BUDGET_TOKENS, percent_of, reading_share
from durable_ops.model.routing import Route
from durable_ops.model.states import Privacy
from durable_ops.model.usage import Usage
from durable_ops.settings import Settings
from tests.support.ports import refusing_port, unanswered_port
from tests.support.prompts import build_request, cv_text, job_text, validate_answer

STRATEGY_SNAPSHOT = tasks.STRATEGY_SNAPSHOT.name
CV_REVIEW = tasks.CV_REVIEW.name

ASGI_URL = "http://127.0.0.1/v1"  # never dialled: requests go to the ASGI app in process
JOB = job_text(
    title="Platform Engineer",
    company="Acme",
    description="Python, Kubernetes and PostgreSQL. Terraform on AWS. Python tooling.",
)
CV = cv_text(text="## Skills\n- Python\n- PostgreSQL\n- AWS\n")
STRATEGY = build_request(STRATEGY_SNAPSHOT, JOB, CV)
UNCHECKED = InferenceRequest("probe", {"type": "object"}, [{"role": "user", "content": "hi"}])


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def asgi_client(app: Starlette, **options: Any) -> ModelClient:
    options.setdefault("route", Route.LOCAL)
    return ModelClient(ASGI_URL, "dev-heuristic", transport=httpx.ASGITransport(app), **options)


def scripted_client(
    handler: Callable[[httpx.Request], httpx.Response], **options: Any
) -> ModelClient:
    options.setdefault("route", Route.LOCAL)
    options.setdefault("model", "dev-heuristic")
    return ModelClient(ASGI_URL, transport=httpx.MockTransport(handler), **options)


def completion(content: Any, finish_reason: str = "stop") -> dict[str, Any]:
    return {"choices": [{"message": {"content": content}, "finish_reason": finish_reason}]}


@contextmanager
def serving(app: Starlette) -> Iterator[str]:
    """``app`` on a real loopback socket; yields its OpenAI base URL."""
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, log_level="warning", timeout_graceful_shutdown=1
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive(), "uvicorn stopped while starting"
        assert time.monotonic() < deadline, "uvicorn did not start in time"
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        thread.join(10)


def refused_url() -> str:
    return f"http://127.0.0.1:{refusing_port()}/v1"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def gauge() -> float | None:
    return REGISTRY.get_sample_value("durable_ops_ai_local_circuit_state")


def test_public_surface() -> None:
    assert set(inference.__all__) == {
        "LOCAL_CIRCUIT_STATE",
        "AnswerValidator",
        "ExternalRouteNotPermitted",
        "InferenceError",
        "InferenceRequest",
        "InferenceResult",
        "InvalidModelOutput",
        "LocalRouteUnavailable",
        "ModelClient",
        "ModelConnectionError",
        "ModelRateLimited",
        "ModelRequestRejected",
        "ModelServerError",
        "ModelTimeout",
        "ModelUnavailable",
        "Provenance",
        "Router",
        "provider_from_url",
    }
    retryable = {
        name
        for name in inference.__all__
        if getattr(getattr(inference, name), "retryable", False) is True
    }
    assert retryable == {
        "ExternalRouteNotPermitted",
        "InferenceError",
        "InvalidModelOutput",
        "LocalRouteUnavailable",
        "ModelConnectionError",
        "ModelRateLimited",
        "ModelServerError",
        "ModelTimeout",
        "ModelUnavailable",
    }
    assert ModelRequestRejected.retryable is False


# --- the client -------------------------------------------------------------


def test_structured_answer_with_provenance() -> None:
    async def scenario() -> None:
        async with asgi_client(create_app()) as client:
            result = await client.complete(STRATEGY)
        assert validate_answer(STRATEGY_SNAPSHOT, result.answer) == result.answer
        assert result.answer["fit_score"] > 0
        assert result.provenance == Provenance("127.0.0.1", "dev-heuristic", "local")

    run(scenario())


def test_request_is_openai_structured_output_at_temperature_zero() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=completion(json.dumps({"ok": 1})))

    async def scenario() -> None:
        async with scripted_client(handler, api_key="sk-test", route=Route.EXTERNAL) as client:
            request = InferenceRequest(
                "probe", {"type": "object"}, [{"role": "user", "content": "hi"}]
            )
            result = await client.complete(request)
        assert result.answer == {"ok": 1}
        assert result.provenance.route == "external"

    run(scenario())
    (request,) = seen
    assert request.method == "POST"
    assert request.url == "http://127.0.0.1/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-test"
    body = json.loads(request.content)
    assert body["model"] == "dev-heuristic"
    assert body["temperature"] == 0
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}  # the server's own counts
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "probe", "strict": True, "schema": {"type": "object"}},
    }
    assert "max_tokens" not in body


def test_no_key_no_authorization_header() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=completion("{}"))

    async def scenario() -> None:
        async with scripted_client(handler) as client:
            await client.complete(InferenceRequest("s", {}, [], max_tokens=300))

    run(scenario())
    assert "authorization" not in seen[0].headers
    assert json.loads(seen[0].content)["max_tokens"] == 300


@pytest.mark.parametrize(
    ("fail_mode", "error", "retryable"),
    [
        ("invalid_json", InvalidModelOutput, True),
        ("schema_mismatch", InvalidModelOutput, True),
        ("500", ModelServerError, True),
        ("429", ModelRateLimited, True),
    ],
)
def test_misbehaving_model_is_classified(
    fail_mode: Any, error: type[InferenceError], retryable: bool
) -> None:
    async def scenario() -> None:
        async with asgi_client(create_app(fail_mode=fail_mode)) as client:
            with pytest.raises(error) as caught:
                await client.complete(STRATEGY)
        assert caught.value.retryable is retryable
        assert caught.value.provenance == client.provenance

    run(scenario())


def test_rate_limit_carries_retry_after() -> None:
    async def scenario() -> None:
        async with asgi_client(create_app(fail_mode="429")) as client:
            with pytest.raises(ModelRateLimited) as caught:
                await client.complete(STRATEGY)
        assert caught.value.retry_after_seconds == 1.0
        assert caught.value.took_nothing
        assert not isinstance(caught.value, ModelUnavailable)  # no outage: ADR 68

    run(scenario())


RFC_9110_EXAMPLE = datetime(2026, 10, 21, 7, 28, tzinfo=UTC)


@pytest.mark.parametrize(
    ("retry_after", "seconds", "at"),
    [
        ("7", 7.0, None),
        ("0.5", 0.5, None),
        ("-3", None, None),
        ("Wed, 21 Oct 2026 07:28:00 GMT", None, RFC_9110_EXAMPLE),
        ("Wed, 21 Oct 2026 07:28:00 -0000", None, RFC_9110_EXAMPLE),  # naive when parsed
        ("Wed Oct 21 07:28:00 2026", None, RFC_9110_EXAMPLE),  # asctime, naive too
        ("Wed, 21 Oct 2026 07:28:00 +9999", None, None),  # no zone datetime takes
        ("soon", None, None),
        ("Feb 9999999999999999999999 Feb 07:28:00 1", None, None),  # OverflowError inside
    ],
)
def test_a_retry_after_is_seconds_or_an_http_date_else_none(
    retry_after: str, seconds: float | None, at: datetime | None
) -> None:
    """A date is kept as a time in UTC for the router to measure on its clock; a value that
    is neither is as none named, never an error of its own."""

    async def scenario() -> None:
        limited = httpx.Response(429, headers={"Retry-After": retry_after})
        async with scripted_client(lambda _: limited) as client:
            with pytest.raises(ModelRateLimited) as caught:
                await client.complete(UNCHECKED)
        assert (caught.value.retry_after_seconds, caught.value.retry_at) == (seconds, at)
        if at is not None:
            assert caught.value.retry_at is not None
            assert caught.value.retry_at.utcoffset() == timedelta(0)

    run(scenario())


def test_a_retry_after_date_is_a_wait_until_then_and_none_once_passed() -> None:
    limited = ModelRateLimited(None, retry_at=RFC_9110_EXAMPLE)
    assert limited.seconds_to_wait(RFC_9110_EXAMPLE - timedelta(seconds=90)) == 90.0
    assert limited.seconds_to_wait(RFC_9110_EXAMPLE + timedelta(days=1)) == 0.0
    assert ModelRateLimited(4.0).seconds_to_wait(RFC_9110_EXAMPLE) == 4.0
    assert ModelRateLimited(None).seconds_to_wait(RFC_9110_EXAMPLE) is None


def test_unknown_model_is_a_permanent_rejection() -> None:
    async def scenario() -> None:
        app = create_app(model="another-model")
        async with asgi_client(app) as client:
            with pytest.raises(ModelRequestRejected) as caught:
                await client.complete(STRATEGY)
        assert caught.value.status_code == 404
        assert caught.value.retryable is False

    run(scenario())


@pytest.mark.parametrize(
    ("response", "error"),
    [
        (httpx.Response(401, json={"error": {"message": "bad key"}}), ModelRequestRejected),
        (httpx.Response(400, text="no"), ModelRequestRejected),
        (httpx.Response(302, headers={"location": "http://127.0.0.1/"}), ModelRequestRejected),
        (httpx.Response(503, text="loading model"), ModelServerError),
        (httpx.Response(200, text="<html>"), InvalidModelOutput),
        (httpx.Response(200, json={"choices": []}), InvalidModelOutput),
        (httpx.Response(200, json=completion(None)), InvalidModelOutput),
        (httpx.Response(200, json=completion('{"a": 1')), InvalidModelOutput),
        (httpx.Response(200, json=completion("[1, 2]")), InvalidModelOutput),
        (httpx.Response(200, json=completion('{"a": 1}', "length")), InvalidModelOutput),
        (  # an encoding its body is not in: httpx's DecodingError is no TransportError
            httpx.Response(
                200, headers={"content-encoding": "gzip"}, stream=httpx.ByteStream(b"{}")
            ),
            InvalidModelOutput,
        ),
        (  # valid, but padded past the 1 MiB cap
            httpx.Response(200, content=json.dumps(completion("{}")).encode() + b" " * (1 << 20)),
            InvalidModelOutput,
        ),
    ],
)
def test_responses_are_classified(response: httpx.Response, error: type[InferenceError]) -> None:
    async def scenario() -> None:
        async with scripted_client(lambda _: response) as client:
            with pytest.raises(error) as caught:
                await client.complete(UNCHECKED)  # envelope only
        assert caught.value.retryable is (error is not ModelRequestRejected)

    run(scenario())


def test_error_messages_do_not_repeat_the_server_body() -> None:
    body = {"error": {"message": "prompt contained jane@example.com"}}

    async def scenario() -> None:
        async with scripted_client(lambda _: httpx.Response(400, json=body)) as client:
            with pytest.raises(ModelRequestRejected) as caught:
                await client.complete(STRATEGY)
        assert "jane" not in str(caught.value)

    run(scenario())


def test_real_socket_answer_timeout_and_refusal() -> None:
    async def scenario(fast: str, silent: str) -> None:
        async with ModelClient(fast, "dev-heuristic", route=Route.LOCAL) as client:
            result = await client.complete(build_request(CV_REVIEW, None, CV))
            assert validate_answer(CV_REVIEW, result.answer)
        async with ModelClient(
            silent, "dev-heuristic", route=Route.LOCAL, timeout_seconds=0.3
        ) as client:
            started = time.monotonic()
            with pytest.raises(ModelTimeout) as timed_out:
                await client.complete(STRATEGY)
            assert time.monotonic() - started < 3
            assert timed_out.value.retryable
        async with ModelClient(refused_url(), "dev-heuristic", route=Route.LOCAL) as client:
            with pytest.raises(ModelUnreachable) as refused:  # nothing was sent
                await client.complete(STRATEGY)
            assert refused.value.retryable

    with serving(create_app()) as fast, serving(silent_app()) as silent:
        run(scenario(fast, silent))


def test_a_connection_never_made_is_unreachable_not_the_models_silence() -> None:
    """A model host that is off (a connect that hangs) took nothing, as a refusing one:
    the client gives the connection up within its own bound and says it cannot reach the
    model. Before, the connect was waited for as long as the model may be silent and
    failed ``model_timeout``, as if the model had taken the request (120 s by default,
    every attempt, each one failing at once)."""
    url = f"http://127.0.0.1:{unanswered_port()}/v1"

    async def scenario() -> None:
        # The connect bound defaults to at most half the bound on silence: the two never race.
        async with ModelClient(url, "m", route=Route.LOCAL, timeout_seconds=1.0) as client:
            with pytest.raises(ModelUnreachable) as unreachable:
                await client.complete(STRATEGY)
            assert client.connect_timeout_seconds == 0.5
        assert unreachable.value.took_nothing
        assert unreachable.value.retryable
        assert unreachable.value.code == "model_connection_error"
        assert str(unreachable.value) == "cannot reach the model (ConnectTimeout)"
        async with ModelClient(
            url, "m", route=Route.LOCAL, timeout_seconds=60, connect_timeout_seconds=0.2
        ) as client:
            with pytest.raises(ModelUnreachable):
                await client.complete(STRATEGY)

    run(scenario())


def test_the_connect_bound_is_its_own_and_never_the_silences() -> None:
    client = ModelClient(ASGI_URL, "m", route=Route.LOCAL, timeout_seconds=120)
    assert client.connect_timeout_seconds == inference.client.CONNECT_TIMEOUT_SECONDS
    assert client.timeout_seconds == 120
    with pytest.raises(ValueError, match="connect_timeout"):
        ModelClient(ASGI_URL, "m", route=Route.LOCAL, connect_timeout_seconds=0)
    run(client.aclose())


def silent_app() -> Starlette:
    """Takes the request and says nothing, not even its status, for a minute."""

    async def hang(request: Request) -> JSONResponse:
        await asyncio.sleep(60)
        return JSONResponse(completion("{}"))

    return Starlette(routes=[routing.Route("/v1/chat/completions", hang, methods=["POST"])])


def trickling_app() -> Starlette:
    async def trickle(request: Request) -> StreamingResponse:
        async def body() -> AsyncIterator[bytes]:
            for _ in range(40):
                yield b" "  # JSON allows leading whitespace; each byte resets a read timeout
                await asyncio.sleep(0.05)
            yield json.dumps(completion("{}")).encode()

        return StreamingResponse(body(), media_type="application/json")

    return Starlette(routes=[routing.Route("/v1/chat/completions", trickle, methods=["POST"])])


def test_a_whole_completion_trickled_in_is_bounded_by_the_timeout_not_each_read() -> None:
    async def scenario(url: str) -> None:
        async with ModelClient(url, "m", route=Route.LOCAL, timeout_seconds=0.5) as client:
            # The trickle ends in a whole answer after 2 s: a timeout per read never fires.
            with pytest.raises(ModelTimeout):
                await client.complete(STRATEGY)

    with serving(trickling_app()) as url:
        run(scenario(url))


def test_client_configuration_is_checked() -> None:
    with pytest.raises(ValueError, match="http"):
        ModelClient("ftp://127.0.0.1/v1", "m", route=Route.LOCAL)
    with pytest.raises(ValueError, match="timeout"):
        ModelClient(ASGI_URL, "m", route=Route.LOCAL, timeout_seconds=0)
    with pytest.raises(ValueError, match="model"):
        ModelClient(ASGI_URL, "m" * 129, route=Route.LOCAL)


def test_provider_is_the_url_host_when_it_fits() -> None:
    assert provider_from_url("http://127.0.0.1:8090/v1") == "127.0.0.1"
    assert provider_from_url("https://API.Example.test/v1") == "api.example.test"
    assert provider_from_url("https://" + "a" * 40 + ".test/v1") == "openai-compatible"


# --- streamed answers -------------------------------------------------------


def chunk(
    content: str | None = None,
    finish_reason: str | None = None,
    *,
    role: str | None = None,
    usage: dict[str, int] | None = None,
) -> dict[str, Any]:
    delta = {key: value for key, value in (("role", role), ("content", content)) if value}
    body: dict[str, Any] = {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }
    if usage is not None:
        body["usage"] = usage
    return body


def sse(*events: dict[str, Any] | str) -> bytes:
    """An event stream: each dict one ``data:`` event, each str written as it is."""
    return b"".join(
        (f"data: {json.dumps(event)}\n\n" if isinstance(event, dict) else event).encode()
        for event in events
    )


def streamed(pieces: list[str], finish_reason: str = "stop", done: bool = True) -> bytes:
    events: list[dict[str, Any] | str] = [chunk(role="assistant")]
    events += [chunk(piece) for piece in pieces]
    events.append(chunk(finish_reason=finish_reason))
    return sse(*events, *(["data: [DONE]\n\n"] if done else []))


def event_stream(body: bytes, status: int = 200, **headers: str) -> httpx.Response:
    return httpx.Response(
        status, content=body, headers={"content-type": "text/event-stream", **headers}
    )


ANSWER_PIECES = ['{"', "ok", '":', " [", "1", ",", " 2", "]}"]  # {"ok": [1, 2]}


class Progress(list[int]):
    """An ``on_progress`` that keeps what it was told."""

    def __call__(self, percent: int) -> None:
        self.append(percent)

    def check(self) -> None:
        assert self == sorted(set(self)), "each value higher than the last"
        assert all(1 <= percent <= 99 for percent in self)


def test_streamed_answer_is_parsed_and_progress_climbs_with_it() -> None:
    progress = Progress()

    async def scenario() -> dict[str, Any]:
        async with asgi_client(create_app()) as client:
            result = await client.complete(STRATEGY, on_progress=progress)
            assert result == await client.complete(STRATEGY)  # the same without a listener
        assert validate_answer(STRATEGY_SNAPSHOT, result.answer) == result.answer
        return result.answer

    answer = run(scenario())
    progress.check()
    assert len(progress) > 10  # it climbed, not jumped
    # Counted in chunks of content, against the task's expected size with its context,
    # from the share the prompt's reading had (the development model reports it).
    chunks = len(dev_stream.pieces(json.dumps(answer, ensure_ascii=False)))
    expected = tasks.STRATEGY_SNAPSHOT.answer_tokens.with_context
    assert expected is not None
    assert STRATEGY.expected_tokens == expected
    prompt = dev_stream.prompt_tokens([message["content"] for message in STRATEGY.messages])
    share = reading_share(prompt, expected)
    assert share > 0
    assert progress[-1] == percent_of(chunks, expected, share)


def test_the_bar_moves_while_the_model_reads_the_prompt_before_the_answer() -> None:
    """Issue: a long prompt kept the bar at 0 % until the first answer token. The development
    model, paced like the real one, reports its reading as llama-server does."""
    long_job = job_text(
        title="Platform Engineer",
        company="Acme",
        description=" ".join(f"Run service {n} on Python, Kubernetes and AWS." for n in range(60)),
    )
    request = build_request(STRATEGY_SNAPSHOT, long_job, CV)
    told: list[tuple[float, int | str]] = []

    async def scenario(url: str) -> None:
        started = time.monotonic()

        def tell(entry: int | str) -> None:
            told.append((time.monotonic() - started, entry))

        async with ModelClient(url, "dev-heuristic", route=Route.LOCAL) as client:
            await client.complete(request, on_progress=tell, on_text=tell)

    with serving(create_app(delay_seconds=1.0)) as url:
        run(scenario(url))
    first_text = next(at for at, entry in told if isinstance(entry, str))
    before = [percent for at, percent in told if isinstance(percent, int) and at < first_text]
    assert before, "the bar stood still until the first answer token"
    assert len(before) > 10  # it moved while the prompt was read, not in one leap
    assert before[-1] >= 20  # the prompt was most of the work
    assert told[-1][0] < 3
    percents = [entry for _, entry in told if isinstance(entry, int)]
    assert percents == sorted(set(percents))
    assert percents[-1] <= 99


def test_progress_stops_at_99_and_never_repeats() -> None:
    pieces = ['{"a": "', *(["xy"] * 500), '"}']
    progress = Progress()

    async def scenario() -> None:
        async with scripted_client(lambda _: event_stream(streamed(pieces))) as client:
            request = InferenceRequest("s", {}, [], max_tokens=2048, expected_tokens=100)
            result = await client.complete(request, on_progress=progress)
        assert result.answer == {"a": "xy" * 500}

    run(scenario())
    progress.check()
    assert progress == list(range(1, 100))  # one call per new percent, the last 99


def test_the_answer_text_is_told_as_it_grows_each_piece_once() -> None:
    told: list[str] = []

    async def scenario() -> None:
        async with scripted_client(lambda _: event_stream(streamed(ANSWER_PIECES))) as client:
            result = await client.complete(InferenceRequest("s", {}, []), on_text=told.append)
        assert result.answer == {"ok": [1, 2]}

    run(scenario())
    assert told == ["".join(ANSWER_PIECES[: n + 1]) for n in range(len(ANSWER_PIECES))]


def test_the_servers_token_count_is_used_when_it_gives_one() -> None:
    body = sse(
        chunk(role="assistant"),
        chunk('{"a": ', usage={"completion_tokens": 30}),
        chunk("1}", usage={"completion_tokens": 60}),
        chunk(finish_reason="stop", usage={"completion_tokens": 60}),
        "data: [DONE]\n\n",
    )
    progress = Progress()

    async def scenario() -> None:
        async with scripted_client(lambda _: event_stream(body)) as client:
            request = InferenceRequest("s", {}, [], max_tokens=120)
            assert (await client.complete(request, on_progress=progress)).answer == {"a": 1}

    run(scenario())
    assert progress == [percent_of(30, 120), percent_of(60, 120)]  # 23, 47


def reading(processed: int, total: int = 2_800, cache: int = 0) -> dict[str, Any]:
    """A chunk of llama-server's report of the prompt's reading (``return_progress``)."""
    body = chunk(role="assistant")
    body["prompt_progress"] = {
        "total": total,
        "cache": cache,
        "processed": processed,
        "time_ms": processed * 5,
    }
    return body


def test_only_the_local_route_asks_for_the_prompts_reading() -> None:
    seen: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return event_stream(streamed(ANSWER_PIECES))

    async def scenario() -> None:
        for route in (Route.LOCAL, Route.EXTERNAL):
            async with scripted_client(handler, route=route) as client:
                assert (await client.complete(UNCHECKED)).answer == {"ok": [1, 2]}

    run(scenario())
    local, external = seen
    assert local["return_progress"] is True  # llama-server: chunks with prompt_progress
    assert "return_progress" not in external  # a provider is not sent a field it may not know
    assert {key: value for key, value in local.items() if key != "return_progress"} == external


def test_the_prompts_reading_moves_the_bar_before_the_first_answer_token() -> None:
    body = sse(
        reading(0),
        reading(2_049),
        reading(2_800),
        *[chunk(piece) for piece in ANSWER_PIECES],
        chunk(finish_reason="stop"),
        {"choices": [], "usage": {"prompt_tokens": 2_800, "completion_tokens": 8}},
        "data: [DONE]\n\n",
    )
    told: list[int | str] = []
    used: list[Usage] = []

    async def scenario() -> None:
        async with scripted_client(lambda _: event_stream(body)) as client:
            request = InferenceRequest("s", {}, [], max_tokens=2048, expected_tokens=235)
            result = await client.complete(
                request,
                on_progress=told.append,
                on_text=told.append,
                on_usage=lambda usage, _: used.append(usage),
            )
        assert result.answer == {"ok": [1, 2]}

    run(scenario())
    share = reading_share(2_800, 235)  # 70: the prompt is most of the work
    assert told[:2] == [share * 2_049 // 2_800, share]  # 51, 70: read, and no text yet
    texts = [entry for entry in told if isinstance(entry, str)]
    assert texts == ["".join(ANSWER_PIECES[: n + 1]) for n in range(len(ANSWER_PIECES))]
    percents = [entry for entry in told if isinstance(entry, int)]
    assert percents == sorted(set(percents))
    assert percents[-1] == percent_of(8, 235, share)  # the answer climbs from the share
    (usage,) = used
    assert (usage.prompt_tokens, usage.completion_tokens) == (2_800, 8)


@pytest.mark.parametrize(
    "report",
    [
        None,
        "half",
        [1, 2],
        {"total": 0, "processed": 0},
        {"total": "2800", "processed": 100},
        {"total": 2_800, "processed": True},
        {"processed": 100},
        {"total": 2_800, "cache": None, "processed": 100},
    ],
)
def test_a_report_of_the_reading_it_cannot_read_is_passed_over(report: object) -> None:
    odd = chunk(role="assistant")
    odd["prompt_progress"] = report
    body = sse(odd, *[chunk(piece) for piece in ANSWER_PIECES], chunk(finish_reason="stop"))
    progress = Progress()

    async def scenario() -> None:
        async with scripted_client(lambda _: event_stream(body)) as client:
            request = InferenceRequest("s", {}, [], expected_tokens=10)
            assert (await client.complete(request, on_progress=progress)).answer == {"ok": [1, 2]}

    run(scenario())
    assert progress[0] == percent_of(1, 10)  # the answer has the whole bar, as without it
    assert progress[-1] == percent_of(8, 10)


def test_progress_counts_against_the_cap_without_an_expected_size_else_a_default() -> None:
    progress = Progress()

    async def scenario() -> None:
        pieces = ['{"a": "', *(["x"] * 200), '"}']
        async with scripted_client(lambda _: event_stream(streamed(pieces))) as client:
            await client.complete(UNCHECKED, on_progress=progress)

    run(scenario())
    progress.check()
    assert progress[-1] == percent_of(202, DEFAULT_BUDGET_TOKENS)


def test_a_server_that_does_not_stream_still_works() -> None:
    progress = Progress()

    def handler(request: httpx.Request) -> httpx.Response:
        assert json.loads(request.content)["stream"] is True  # asked, and ignored
        return httpx.Response(200, json=completion(json.dumps({"ok": [1, 2]})))

    async def scenario() -> None:
        async with scripted_client(handler) as client:
            result = await client.complete(UNCHECKED, on_progress=progress)
        assert result.answer == {"ok": [1, 2]}

    run(scenario())
    assert progress == []  # nothing to count: completion jumps to 100


def test_a_stream_without_done_ends_at_its_finish_reason() -> None:
    async def scenario() -> None:
        body = streamed(ANSWER_PIECES, done=False)
        async with scripted_client(lambda _: event_stream(body)) as client:
            assert (await client.complete(UNCHECKED)).answer == {"ok": [1, 2]}

    run(scenario())


def test_an_emoji_escaped_in_two_chunks_is_one_character_of_the_answer() -> None:
    """A server that escapes its text sends each half of an emoji as a chunk of its own
    (``"\\ud83d"``, then ``"\\ude00"``): the answer holds the emoji, which it can publish."""

    async def scenario() -> None:
        body = streamed(['{"ok": "', "\ud83d", "\ude00", '"}'])
        async with scripted_client(lambda _: event_stream(body)) as client:
            answer = (await client.complete(UNCHECKED)).answer
        assert answer == {"ok": "\U0001f600"}
        assert json.dumps(answer, ensure_ascii=False).encode()

    run(scenario())


def test_an_answer_spelling_half_a_character_is_no_answer() -> None:
    async def scenario() -> None:
        body = streamed(['{"ok": "\\ud83d"}'])
        async with scripted_client(lambda _: event_stream(body)) as client:
            with pytest.raises(InvalidModelOutput, match="half a character"):
                await client.complete(UNCHECKED)

    run(scenario())


FRAMINGS = {
    "crlf": streamed(ANSWER_PIECES).replace(b"\n", b"\r\n"),
    "cr": streamed(ANSWER_PIECES).replace(b"\n", b"\r"),
    "no space, comments, other fields": (
        b"\xef\xbb\xbf: keep-alive\n\nevent: message\nid: 7\nretry: 100\n"
        + streamed(ANSWER_PIECES).replace(b"data: ", b"data:")
    ),
    "one event over two data lines": (
        b'data: {"choices": [{"delta":\ndata: {"content": "{}"}, "finish_reason": "stop"}]}\n\n'
        b"data: [DONE]"  # and no final line ending
    ),
}


@pytest.mark.parametrize("body", FRAMINGS.values(), ids=FRAMINGS.keys())
def test_event_stream_framings(body: bytes) -> None:
    async def scenario() -> None:
        async with scripted_client(lambda _: event_stream(body)) as client:
            answer = (await client.complete(UNCHECKED)).answer
        assert answer in ({"ok": [1, 2]}, {})

    run(scenario())


def test_chunks_split_anywhere_decode_the_same() -> None:
    text = json.dumps({"ok": "café ✓ 日本"}, ensure_ascii=False)
    body = streamed([text[:9], text[9:12], text[12:]]).replace(b"\n", b"\r\n")

    async def pieces_of(size: int) -> AsyncIterator[bytes]:
        for start in range(0, len(body), size):
            yield body[start : start + size]

    async def scenario() -> None:
        for size in (1, 2, 3, 7):

            def handler(_: httpx.Request, size: int = size) -> httpx.Response:
                headers = {"content-type": "text/event-stream"}
                return httpx.Response(200, headers=headers, content=pieces_of(size))

            async with scripted_client(handler) as client:
                assert (await client.complete(UNCHECKED)).answer == {"ok": "café ✓ 日本"}

    run(scenario())


@given(st.binary(max_size=300), st.lists(st.integers(1, 40), max_size=20))
def test_the_event_decoder_reads_any_split_the_same(noise: bytes, cuts: list[int]) -> None:
    body = b"data: a\r\n\r\n: c\rdata: b\ndata: \xc3\xa9\n\nid: 1\n\n" + noise
    whole = _events(body, [len(body)])
    assert _events(body, cuts) == whole
    if whole is not None:
        assert whole[:2] == [Event("a"), Event("b\né")]


def _events(body: bytes, cuts: list[int]) -> list[Event] | None:
    decoder, found, start = EventDecoder(), [], 0
    try:
        for size in [*cuts, len(body)]:
            found += decoder.feed(body[start : start + size])
            start += size
        return found + decoder.close()
    except MalformedStream:
        return None


@pytest.mark.parametrize(
    ("body", "error", "message"),
    [
        (streamed(ANSWER_PIECES, "length"), InvalidModelOutput, "cut off"),
        (streamed(["Sure! ", "Here it is"]), InvalidModelOutput, "not JSON"),
        (streamed(["[1, ", "2]"]), InvalidModelOutput, "not a JSON object"),
        (streamed([]), InvalidModelOutput, "not JSON"),
        (b'{"choices": []}\n\n', InvalidModelOutput, "not an event field"),
        (b"data: {oops\n\n", InvalidModelOutput, "not a JSON chunk"),
        (b"data: [1, 2]\n\n", InvalidModelOutput, "not a JSON chunk"),
        (sse({"object": "chat.completion.chunk"}), InvalidModelOutput, "not a chat completion"),
        (sse({"choices": ["x"]}), InvalidModelOutput, "not a chat completion"),
        (sse({"choices": [{"delta": {"content": 7}}]}), InvalidModelOutput, "no text content"),
        (b'error: {"code": 500, "message": "boom"}\n\n', InvalidModelOutput, "error"),
        (sse(chunk("{"), {"error": {"message": "overloaded"}}), InvalidModelOutput, "error"),
        (b"data: \xff\xfe\n\n", InvalidModelOutput, "UTF-8"),
        (  # a well-formed stream, but past the 1 MiB cap
            sse(chunk(role="assistant"), *([": padding " + "x" * 1000 + "\n\n"] * 1100)),
            InvalidModelOutput,
            "1 MiB",
        ),
        (streamed(ANSWER_PIECES, done=False)[:-40], ModelConnectionError, "stream ended"),
        (streamed(ANSWER_PIECES)[:70], ModelConnectionError, "stream ended"),
        (b"", ModelConnectionError, "stream ended"),
    ],
)
def test_streamed_responses_are_classified(
    body: bytes, error: type[InferenceError], message: str
) -> None:
    async def scenario() -> None:
        async with scripted_client(lambda _: event_stream(body)) as client:
            with pytest.raises(error, match=message) as caught:
                await client.complete(UNCHECKED)
        assert caught.value.retryable
        assert caught.value.provenance == client.provenance
        assert "boom" not in str(caught.value)
        assert "overloaded" not in str(caught.value)

    run(scenario())


@pytest.mark.parametrize(
    ("status", "error"),
    [(500, ModelServerError), (429, ModelRateLimited), (400, ModelRequestRejected)],
)
def test_an_error_status_is_classified_whatever_its_body(
    status: int, error: type[InferenceError]
) -> None:
    # The body of an error status is read whole and never parsed, event stream or not.
    body = streamed(ANSWER_PIECES)

    async def scenario() -> None:
        response = event_stream(body, status, **{"retry-after": "2"})
        async with scripted_client(lambda _: response) as client:
            with pytest.raises(error) as caught:
                await client.complete(UNCHECKED)
        if isinstance(caught.value, ModelRateLimited):
            assert caught.value.retry_after_seconds == 2.0

    run(scenario())


@pytest.mark.parametrize("fail_mode", ["invalid_json", "schema_mismatch"])
def test_misbehaving_streams_are_invalid_output(fail_mode: Any) -> None:
    seen: list[str] = []

    async def recording(scope: Any, receive: Any, send: Any) -> None:
        async def sending(message: Any) -> None:
            if message["type"] == "http.response.start":
                seen.append(dict(message["headers"]).get(b"content-type", b"").decode())
            await send(message)

        await create_app(fail_mode=fail_mode)(scope, receive, sending)

    async def scenario() -> None:
        transport = httpx.ASGITransport(recording)
        async with ModelClient(
            ASGI_URL, "dev-heuristic", route=Route.LOCAL, transport=transport
        ) as client:
            with pytest.raises(InvalidModelOutput):
                await client.complete(STRATEGY)

    run(scenario())
    assert seen == ["text/event-stream; charset=utf-8"]


# --- the timeout bounds the model's silence (ADR 64) ---------------------------

SILENCE_SECONDS = 0.5


@pytest.mark.parametrize("route", [Route.LOCAL, Route.EXTERNAL])
def test_a_model_slower_in_all_than_the_timeout_finishes_while_it_shows_progress(
    route: Route,
) -> None:
    """2.5 s for an answer, five times the timeout: the local route reads the prompt with
    reports then streams the answer; the external one, not asked, streams the answer."""
    progress = Progress()

    async def scenario(url: str) -> float:
        async with ModelClient(
            url, "dev-heuristic", route=route, timeout_seconds=SILENCE_SECONDS
        ) as client:
            started = time.monotonic()
            result = await client.complete(STRATEGY, on_progress=progress)
            assert validate_answer(STRATEGY_SNAPSHOT, result.answer)
            return time.monotonic() - started

    with serving(create_app(delay_seconds=2.5)) as url:
        took = run(scenario(url))
    assert took > 2 * SILENCE_SECONDS
    progress.check()
    assert len(progress) > 10


def paced_app(events: list[dict[str, Any] | str], every: float) -> Starlette:
    """Streams ``events`` one every ``every`` seconds, as a model slow at each step."""

    async def answer(request: Request) -> StreamingResponse:
        async def body() -> AsyncIterator[bytes]:
            for event in events:
                await asyncio.sleep(every)
                yield sse(event)

        return StreamingResponse(body(), media_type="text/event-stream")

    return Starlette(routes=[routing.Route("/v1/chat/completions", answer, methods=["POST"])])


def test_reading_a_long_prompt_for_longer_than_the_timeout_is_no_silence() -> None:
    """Issue: the real model reads the largest admitted prompt (some 14,000 tokens) for
    80 to 110 s, reporting every 2,048 tokens, and failed task_timeout on every attempt.
    Here the reading takes 1.8 s and the answer 1.8 s more, each step 0.2 s apart."""
    events: list[dict[str, Any] | str] = [
        *[reading(processed, total=14_000) for processed in range(0, 14_000, 2_048)],
        reading(14_000, total=14_000),
        *[chunk(piece) for piece in ANSWER_PIECES],
        chunk(finish_reason="stop"),
        "data: [DONE]\n\n",
    ]
    told: list[int | str] = []

    async def scenario(url: str) -> float:
        async with ModelClient(
            url, "m", route=Route.LOCAL, timeout_seconds=SILENCE_SECONDS
        ) as client:
            started = time.monotonic()
            request = InferenceRequest("s", {}, [], expected_tokens=8)
            result = await client.complete(request, on_progress=told.append, on_text=told.append)
            assert result.answer == {"ok": [1, 2]}
            return time.monotonic() - started

    with serving(paced_app(events, every=0.2)) as url:
        took = run(scenario(url))
    assert took > 6 * SILENCE_SECONDS
    first_text = next(n for n, entry in enumerate(told) if isinstance(entry, str))
    assert first_text >= 6  # the reading moved the bar all along before the first piece


EMPTY_DELTA = {"choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": None}]}
NO_PROGRESS = {
    "keep-alive comments": [": keep-alive\n\n"],
    "empty deltas": [EMPTY_DELTA],
    "role-only chunks": [chunk(role="assistant")],
    # A report that does not pass the most read so far: the reading did not move on.
    "a reading that comes and goes": [reading(1_000), reading(2_000)],
    "a reading beyond its total": [reading(2_800 + n) for n in range(1, 200)],
}


def noisy_app(noise: list[dict[str, Any] | str]) -> Starlette:
    """Reads 2,000 of the prompt, gives one piece, then sends ``noise`` over and over, 20 a
    second, for 10 s: bytes and events, and no progress."""

    async def answer(request: Request) -> StreamingResponse:
        async def body() -> AsyncIterator[bytes]:
            yield sse(reading(2_000), reading(2_800), chunk('{"a": '))
            for n in range(200):
                await asyncio.sleep(0.05)
                yield sse(noise[n % len(noise)])

        return StreamingResponse(body(), media_type="text/event-stream")

    return Starlette(routes=[routing.Route("/v1/chat/completions", answer, methods=["POST"])])


@pytest.mark.parametrize("noise", NO_PROGRESS.values(), ids=NO_PROGRESS.keys())
def test_bytes_without_progress_do_not_put_off_the_timeout(
    noise: list[dict[str, Any] | str],
) -> None:
    async def scenario(url: str) -> None:
        async with ModelClient(
            url, "m", route=Route.LOCAL, timeout_seconds=SILENCE_SECONDS
        ) as client:
            started = time.monotonic()
            with pytest.raises(ModelTimeout, match=r"no sign of progress for 0\.5 seconds"):
                await client.complete(InferenceRequest("s", {}, [], max_tokens=10))
            assert time.monotonic() - started < 3  # the noise would have gone on for 10 s

    with serving(noisy_app(noise)) as url:
        run(scenario(url))


def stalling_app(disconnected: threading.Event) -> Starlette:
    """Streams the start of an answer, then only keep-alives, until the client leaves."""

    async def stall(request: Request) -> StreamingResponse:
        async def body() -> AsyncIterator[bytes]:
            try:
                yield sse(chunk(role="assistant"), chunk('{"a": '))
                for _ in range(600):
                    await asyncio.sleep(0.05)
                    yield b": keep-alive\n\n"
            finally:
                disconnected.set()

        return StreamingResponse(body(), media_type="text/event-stream")

    return Starlette(routes=[routing.Route("/v1/chat/completions", stall, methods=["POST"])])


def test_cancelling_the_caller_closes_the_connection_at_once() -> None:
    disconnected = threading.Event()

    async def scenario(url: str) -> None:
        first = asyncio.Event()
        async with ModelClient(url, "m", route=Route.LOCAL, timeout_seconds=30) as client:
            request = InferenceRequest("s", {}, [], max_tokens=10)
            task = asyncio.create_task(client.complete(request, on_progress=lambda _: first.set()))
            await asyncio.wait_for(first.wait(), 5)  # the stream is flowing
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # While the client (and its connection pool) is still open: the
            # cancel itself closed the connection, and the server noticed.
            assert await asyncio.to_thread(disconnected.wait, 5), "the server never saw it"

    with serving(stalling_app(disconnected)) as url:
        run(scenario(url))


# --- a route that refuses the json_schema form ---------------------------------

# What llama-cpp-python 0.3.36's server answers a json_schema request: its route
# wrapper turns FastAPI's validation error into a 500 (reproduced with its own
# error handler; the traceback lines it appends are left out).
LLAMA_CPP_PYTHON_REFUSAL = {
    "error": {
        "message": (
            "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', "
            "'response_format', 'type'), 'msg': \"Input should be 'text' or "
            "'json_object'\", 'input': 'json_schema', 'ctx': {'expected': \"'text' or "
            "'json_object'\"}}\n"
        ),
        "type": "internal_server_error",
        "param": None,
        "code": None,
    }
}
STRATEGY_ANSWER = {
    "fit_score": 64,
    "summary": "A Python and PostgreSQL match; Kubernetes and Terraform are missing.",
    "strengths": ["Python", "PostgreSQL"],
    "gaps": ["Kubernetes", "Terraform"],
    "next_steps": ["Show one Terraform project"],
}


def json_object_only_app(seen: list[dict[str, Any]]) -> Starlette:
    """Stands in for llama-cpp-python's server: json_object (+ schema) only."""

    async def completions(request: Request) -> Any:
        body = await request.json()
        seen.append(body)
        response_format = body["response_format"]
        if response_format["type"] != "json_object":
            return JSONResponse(LLAMA_CPP_PYTHON_REFUSAL, status_code=500)
        assert response_format["schema"] == STRATEGY.schema  # it constrains with the schema
        text = json.dumps(STRATEGY_ANSWER)
        pieces = [text[i : i + 7] for i in range(0, len(text), 7)]
        return StreamingResponse(iter([streamed(pieces)]), media_type="text/event-stream")

    return Starlette(routes=[routing.Route("/v1/chat/completions", completions, methods=["POST"])])


def fallbacks(logs: list[MutableMapping[str, Any]]) -> list[MutableMapping[str, Any]]:
    return [entry for entry in logs if entry["event"] == "model_response_format_fallback"]


def form(client: ModelClient) -> ResponseFormat:
    """The form the client asks in now (a call, so that no earlier check narrows it)."""
    return client.response_format


def test_a_route_refusing_json_schema_is_asked_in_json_object_form_from_then_on() -> None:
    seen: list[dict[str, Any]] = []

    async def scenario(url: str) -> None:
        async with ModelClient(url, "qwen-local", route=Route.LOCAL) as client:
            assert form(client) is ResponseFormat.JSON_SCHEMA
            with capture_logs() as first_logs:
                first = await client.complete(STRATEGY)
            assert first.answer == validate_answer(STRATEGY_SNAPSHOT, STRATEGY_ANSWER)
            assert first.provenance == Provenance("127.0.0.1", "qwen-local", "local")
            assert [body["response_format"]["type"] for body in seen] == [
                "json_schema",
                "json_object",
            ]
            (line,) = fallbacks(first_logs)  # said once, in one line
            assert line["log_level"] == "warning"
            assert (line["route"], line["model"], line["url"]) == (
                "local",
                "qwen-local",
                f"{url}/chat/completions",
            )
            assert (line["refused"], line["refused_status"], line["using"]) == (
                "json_schema",
                500,
                "json_object",
            )
            assert form(client) is ResponseFormat.JSON_OBJECT

            with capture_logs() as later_logs:
                second = await client.complete(STRATEGY)
            assert second.answer == first.answer
            assert len(seen) == 3  # remembered: one request, straight in json_object form
            assert seen[2]["response_format"] == {"type": "json_object", "schema": STRATEGY.schema}
            assert fallbacks(later_logs) == []

    with serving(json_object_only_app(seen)) as url:
        run(scenario(url))


REFUSALS = {
    "llama-cpp-python": (500, LLAMA_CPP_PYTHON_REFUSAL),
    "fastapi-validation": (
        422,
        {
            "detail": [
                {
                    "type": "literal_error",
                    "loc": ["body", "response_format", "type"],
                    "msg": "Input should be 'text' or 'json_object'",
                    "input": "json_schema",
                }
            ]
        },
    ),
    "openai-model-without-structured-outputs": (
        400,
        {
            "error": {
                "message": "Invalid parameter: 'response_format' of type 'json_schema' is "
                "not supported with this model.",
                "type": "invalid_request_error",
                "param": "response_format",
            }
        },
    ),
    "old-llama-server": (
        400,
        {
            "error": 'response_format type must be one of "text" or "json_object", but got: '
            "json_schema"
        },
    ),
}


@pytest.mark.parametrize(("status", "body"), REFUSALS.values(), ids=REFUSALS.keys())
def test_refusals_of_json_schema_are_recognised(status: int, body: dict[str, Any]) -> None:
    forms: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        forms.append(json.loads(request.content)["response_format"]["type"])
        if forms[-1] == "json_schema":
            return httpx.Response(status, json=body)
        return httpx.Response(200, json=completion(json.dumps({"ok": 1})))

    async def scenario() -> None:
        async with scripted_client(handler) as client:
            assert (await client.complete(UNCHECKED)).answer == {"ok": 1}
            assert form(client) is ResponseFormat.JSON_OBJECT

    run(scenario())
    assert forms == ["json_schema", "json_object"]


ECHOED_REQUEST = json.dumps({"response_format": {"type": "json_schema", "json_schema": {}}})
NOT_REFUSALS = {
    "server-crash": (
        httpx.Response(500, json={"error": {"message": "llama_decode failed", "code": 500}}),
        ModelServerError,
    ),
    "crash-echoing-the-request": (
        httpx.Response(500, text=f"internal error while handling {ECHOED_REQUEST}"),
        ModelServerError,
    ),
    "a-keyword-of-the-schema-is-unsupported": (
        httpx.Response(400, text="response_format.json_schema: unsupported keyword maxLength"),
        ModelRequestRejected,
    ),
    "overloaded-server-with-the-refusal-text": (
        httpx.Response(503, json=LLAMA_CPP_PYTHON_REFUSAL),
        ModelServerError,
    ),
    "unknown-model-with-the-refusal-text": (
        httpx.Response(404, json=LLAMA_CPP_PYTHON_REFUSAL),
        ModelRequestRejected,
    ),
    "refusal-text-buried-in-a-huge-body": (
        httpx.Response(500, text=json.dumps(LLAMA_CPP_PYTHON_REFUSAL) + " " * REFUSAL_BODY_BYTES),
        ModelServerError,
    ),
}


@pytest.mark.parametrize(("response", "error"), NOT_REFUSALS.values(), ids=NOT_REFUSALS.keys())
def test_other_errors_are_not_taken_for_a_refusal(
    response: httpx.Response, error: type[InferenceError]
) -> None:
    forms: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        forms.append(json.loads(request.content)["response_format"]["type"])
        return response

    async def scenario() -> None:
        async with scripted_client(handler) as client:
            with capture_logs() as logs, pytest.raises(error):
                await client.complete(UNCHECKED)
            assert form(client) is ResponseFormat.JSON_SCHEMA
            assert fallbacks(logs) == []

    run(scenario())
    assert forms == ["json_schema"]  # no second request


def test_a_fallback_the_server_fails_too_is_not_remembered() -> None:
    forms: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        forms.append(json.loads(request.content)["response_format"]["type"])
        if forms[-1] == "json_schema":
            return httpx.Response(500, json=LLAMA_CPP_PYTHON_REFUSAL)
        return httpx.Response(500, json={"error": {"message": "llama_decode failed"}})

    async def scenario() -> None:
        async with scripted_client(handler) as client:
            with capture_logs() as logs, pytest.raises(ModelServerError) as caught:
                await client.complete(UNCHECKED)
            assert caught.value.provenance == client.provenance
            assert form(client) is ResponseFormat.JSON_SCHEMA  # asked afresh next time
            assert fallbacks(logs) == []

    run(scenario())
    assert forms == ["json_schema", "json_object"]


def test_the_fallback_is_remembered_per_route() -> None:
    def refusing(request: httpx.Request) -> httpx.Response:
        if json.loads(request.content)["response_format"]["type"] == "json_schema":
            return httpx.Response(500, json=LLAMA_CPP_PYTHON_REFUSAL)
        return httpx.Response(200, json=completion("{}"))

    async def scenario() -> None:
        local = scripted_client(refusing)
        external = scripted_client(lambda _: httpx.Response(200, json=completion("{}")))
        router, clock = make_router(local, external)
        await router.infer(UNCHECKED, Privacy.EXTERNAL_ALLOWED, True)
        await router.infer_external(UNCHECKED, Privacy.EXTERNAL_ALLOWED, True)
        assert form(local) is ResponseFormat.JSON_OBJECT
        assert form(external) is ResponseFormat.JSON_SCHEMA
        assert router.breaker.state(clock()) is CircuitState.CLOSED  # a refusal is no outage
        await router.aclose()

    run(scenario())


# --- the router ---------------------------------------------------------------


def make_router(
    local: ModelClient, external: ModelClient | None = None, threshold: int = 2
) -> tuple[Router, Clock]:
    clock = Clock()
    return Router(local, CircuitBreaker(threshold, 30.0), external, clock=clock), clock


def another_fails(router: Router, now: float) -> None:
    """Another call the local circuit admitted at ``now`` fails."""
    ticket = router.breaker.allow(now)
    assert ticket is not None
    router.breaker.record_failure(now, ticket)


def test_both_routes_pass_progress_on() -> None:
    local_progress, external_progress = Progress(), Progress()

    async def scenario() -> None:
        external = asgi_client(create_app(), route=Route.EXTERNAL)
        router, _ = make_router(asgi_client(create_app()), external)
        request = build_request(CV_REVIEW, JOB, CV)
        await router.infer(request, Privacy.LOCAL_ONLY, False, on_progress=local_progress)
        await router.infer_external(
            request, Privacy.EXTERNAL_ALLOWED, True, on_progress=external_progress
        )
        await router.aclose()

    run(scenario())
    local_progress.check()
    assert local_progress
    assert local_progress == external_progress


def test_router_serves_locally_and_keeps_the_circuit_closed() -> None:
    async def scenario() -> None:
        router, clock = make_router(asgi_client(create_app()))
        result = await router.infer(STRATEGY, Privacy.LOCAL_ONLY, task_external_allowed=False)
        assert result.provenance.route == "local"
        assert router.breaker.state(clock()) is CircuitState.CLOSED
        assert gauge() == 0
        await router.aclose()

    run(scenario())


@pytest.mark.parametrize(
    ("privacy", "task_allowed", "with_external", "fallback"),
    [
        (Privacy.EXTERNAL_ALLOWED, True, True, True),
        (Privacy.LOCAL_ONLY, True, True, False),
        (Privacy.EXTERNAL_ALLOWED, False, True, False),
        (Privacy.EXTERNAL_ALLOWED, True, False, False),
    ],
)
def test_local_down_says_whether_to_fall_back(
    privacy: Privacy, task_allowed: bool, with_external: bool, fallback: bool
) -> None:
    async def scenario() -> None:
        external = asgi_client(create_app(), route=Route.EXTERNAL) if with_external else None
        local = ModelClient(refused_url(), "dev-heuristic", route=Route.LOCAL)
        # On the real clock: with no fallback the call asks again and waits for the
        # circuit's trial before it gives up.
        router = Router(local, CircuitBreaker(1, 0.2), external, ask_again_seconds=0.01)
        with pytest.raises(LocalRouteUnavailable) as caught:
            await router.infer(STRATEGY, privacy, task_allowed)
        assert caught.value.fallback_permitted is fallback
        assert caught.value.retryable
        assert caught.value.reason == "model_connection_error"
        assert isinstance(caught.value.__cause__, ModelConnectionError)
        assert caught.value.provenance is not None
        assert caught.value.provenance.route == "local"
        await router.aclose()

    run(scenario())


def counted_local(fail_mode: FailMode) -> tuple[Starlette, list[int], ModelClient]:
    """A local route to a dev model failing in ``fail_mode``, and the requests it got."""
    calls: list[int] = []
    app = create_app(fail_mode=fail_mode)

    async def counting(scope: Any, receive: Any, send: Any) -> None:
        calls.append(1)
        await app(scope, receive, send)

    transport = httpx.ASGITransport(counting)
    local = ModelClient(ASGI_URL, "dev-heuristic", route=Route.LOCAL, transport=transport)
    return app, calls, local


def test_circuit_opens_then_recovers_through_one_trial() -> None:
    app, calls, local = counted_local("500")

    async def scenario() -> None:
        router, clock = make_router(local, threshold=2)
        for _ in range(2):
            with pytest.raises(LocalRouteUnavailable, match="model_server_error"):
                await router.infer(STRATEGY, Privacy.EXTERNAL_ALLOWED, True)
        assert router.breaker.state(clock()) is CircuitState.OPEN
        assert gauge() == 2

        # With nowhere else to go, a call waits for the circuit instead of failing
        # circuit_open at once, and the open circuit spares the model meanwhile.
        waiting = asyncio.create_task(router.infer(STRATEGY, Privacy.LOCAL_ONLY, False))
        await asyncio.sleep(3 * CIRCUIT_POLL_SECONDS)
        assert not waiting.done()
        assert len(calls) == 2
        clock.now += 30
        assert gauge() == 1
        app.state.config.fail_mode = None  # the model came back
        result = await asyncio.wait_for(waiting, 5)  # the half-open trial
        assert result.answer["fit_score"] >= 0
        assert router.breaker.state(clock()) is CircuitState.CLOSED
        assert gauge() == 0
        assert len(calls) == 3
        await router.aclose()

    run(scenario())


def test_a_loading_model_is_asked_again_until_the_circuit_opens_then_waited_for() -> None:
    """llama-server answers 503 while it loads its model: no model took the request, so a
    call with nowhere else to go asks again, and once the 503s open the circuit it waits
    for the half-open trial instead of spending its attempt."""
    app, calls, local = counted_local("loading")

    async def scenario() -> None:
        clock = Clock()
        router = Router(local, CircuitBreaker(2, 30.0), clock=clock, ask_again_seconds=0.01)
        waiting = asyncio.create_task(router.infer(STRATEGY, Privacy.LOCAL_ONLY, False))
        while router.breaker.state(clock()) is not CircuitState.OPEN:
            await asyncio.sleep(0.01)
        await asyncio.sleep(3 * CIRCUIT_POLL_SECONDS)
        assert not waiting.done()
        assert len(calls) == 2  # the open circuit spares the loading model
        app.state.config.fail_mode = None  # loaded
        clock.now += 30
        result = await asyncio.wait_for(waiting, 5)
        assert result.answer["fit_score"] >= 0
        assert len(calls) == 3
        await router.aclose()

    run(scenario())


def test_a_server_error_other_than_loading_ends_the_call_at_once() -> None:
    """A 500 came from a model that took the request (it may have run it), so, unlike a
    503 (loading, nothing taken), it is not asked again within the call."""
    _, calls, local = counted_local("500")

    async def scenario() -> None:
        router = Router(local, CircuitBreaker(3, 30.0), clock=Clock(), ask_again_seconds=0.01)
        with pytest.raises(LocalRouteUnavailable, match="model_server_error"):
            await asyncio.wait_for(router.infer(STRATEGY, Privacy.LOCAL_ONLY, False), 5)
        await router.aclose()

    run(scenario())
    assert len(calls) == 1


def test_a_call_waiting_for_the_circuit_fails_once_another_calls_trial_failed() -> None:
    """Another call took the half-open trial: the waiting call waits for its outcome, and
    when the trial failed (the circuit open again) it fails ``circuit_open`` without
    reaching the model."""

    async def scenario() -> None:
        local = ModelClient(refused_url(), "dev-heuristic", route=Route.LOCAL)
        router, clock = make_router(local, threshold=1)
        another_fails(router, clock())  # the model is down
        waiting = asyncio.create_task(router.infer(STRATEGY, Privacy.LOCAL_ONLY, False))
        await asyncio.sleep(2 * CIRCUIT_POLL_SECONDS)
        clock.now += 30
        trial = router.breaker.allow(clock())  # another call took the trial
        assert trial is not None
        await asyncio.sleep(2 * CIRCUIT_POLL_SECONDS)
        assert not waiting.done()  # the trial may still close the circuit
        router.breaker.record_failure(clock(), trial)  # it did not
        with pytest.raises(LocalRouteUnavailable, match="circuit_open"):
            await asyncio.wait_for(waiting, 5)
        await router.aclose()

    run(scenario())


def test_a_model_host_that_never_answers_is_asked_again_until_the_circuit_opens() -> None:
    """Connects that hang (the model's host off) are failures that took nothing, as
    refusals are: with nowhere else to go the call asks again, each try lasting the
    connect bound, until they open the circuit, then waits for its trial. Before, the
    first try was waited for as long as the model may be silent and ended the call
    ``model_timeout``; the breaker had counted one failure."""

    async def scenario() -> None:
        url = f"http://127.0.0.1:{unanswered_port()}/v1"
        local = ModelClient(
            url, "m", route=Route.LOCAL, timeout_seconds=30, connect_timeout_seconds=0.1
        )
        clock = Clock()
        router = Router(local, CircuitBreaker(3, 30.0), clock=clock, ask_again_seconds=0.01)
        waiting = asyncio.create_task(router.infer(STRATEGY, Privacy.LOCAL_ONLY, False))
        while router.breaker.state(clock()) is not CircuitState.OPEN:
            assert not waiting.done(), waiting.exception()  # asking again, not failed
            await asyncio.sleep(0.01)
        await asyncio.sleep(3 * CIRCUIT_POLL_SECONDS)
        assert not waiting.done()  # waiting for the circuit's trial
        assert router.breaker.consecutive_failures == 3
        clock.now += 30  # the cooldown passed: this call is the trial, and it fails too
        with pytest.raises(LocalRouteUnavailable) as caught:
            await asyncio.wait_for(waiting, 10)
        assert caught.value.reason == "model_connection_error"
        assert isinstance(caught.value.__cause__, ModelUnreachable)
        assert router.breaker.state(clock()) is CircuitState.OPEN
        await router.aclose()

    run(scenario())


class Dropping(httpx.AsyncBaseTransport):
    """Drops the connection of its first ``drops`` requests, as a model server killed
    mid-prompt does, then serves the development model."""

    def __init__(self, drops: int) -> None:
        self.drops, self.calls = drops, 0
        self._model = httpx.ASGITransport(create_app())

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1
        if self.calls <= self.drops:
            message = "Server disconnected without sending a response."
            raise httpx.RemoteProtocolError(message, request=request)
        return await self._model.handle_async_request(request)


def test_a_request_the_model_dropped_is_sent_again_once() -> None:
    """A model restarted while it held the request: with nowhere else to go the call
    sends it again (a failure for the breaker), once; dropped again, it fails."""

    async def scenario(drops: int) -> tuple[Router, Dropping]:
        transport = Dropping(drops)
        local = ModelClient(ASGI_URL, "dev-heuristic", route=Route.LOCAL, transport=transport)
        router = Router(local, CircuitBreaker(3, 30.0), ask_again_seconds=0.01)
        if drops == 1:
            result = await router.infer(STRATEGY, Privacy.LOCAL_ONLY, False)
            assert result.answer["fit_score"] >= 0
        else:
            with pytest.raises(LocalRouteUnavailable, match="model_connection_error"):
                await router.infer(STRATEGY, Privacy.LOCAL_ONLY, False)
        await router.aclose()
        return router, transport

    router, once = run(scenario(1))
    assert once.calls == 2
    assert router.breaker.state(time.monotonic()) is CircuitState.CLOSED
    router, twice = run(scenario(2))
    assert twice.calls == 2  # not a third time: a dropped call may have taken a timeout
    assert router.breaker.consecutive_failures == 2


def test_a_dropped_request_that_may_fall_back_does_so_at_once() -> None:
    async def scenario() -> Dropping:
        transport = Dropping(1)
        local = ModelClient(ASGI_URL, "dev-heuristic", route=Route.LOCAL, transport=transport)
        external = asgi_client(create_app(), route=Route.EXTERNAL)
        router = Router(local, CircuitBreaker(3, 30.0), external, ask_again_seconds=0.01)
        with pytest.raises(LocalRouteUnavailable) as caught:
            await router.infer(STRATEGY, Privacy.EXTERNAL_ALLOWED, True)
        assert caught.value.fallback_permitted
        await router.aclose()
        return transport

    assert run(scenario()).calls == 1


class Faulty(httpx.AsyncBaseTransport):
    """Fails its first requests with ``faults`` in turn (``ConnectError``: a refused
    connection, nothing sent; ``RemoteProtocolError``: a request the model dropped), then
    serves the development model."""

    def __init__(self, *faults: type[httpx.TransportError]) -> None:
        self.faults, self.calls = faults, 0
        self._model = httpx.ASGITransport(create_app())

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1
        if self.calls <= len(self.faults):
            raise self.faults[self.calls - 1]("scripted fault", request=request)
        return await self._model.handle_async_request(request)


def test_a_refused_connection_does_not_use_up_the_resend_of_a_dropped_request() -> None:
    """The one resend is for a request the model took and dropped; a refusal before it
    (a model server not listening yet) took nothing and is asked again on its own count,
    so a restart that refuses first and then drops the request is still ridden out."""

    async def scenario() -> Faulty:
        transport = Faulty(httpx.ConnectError, httpx.RemoteProtocolError)
        local = ModelClient(ASGI_URL, "dev-heuristic", route=Route.LOCAL, transport=transport)
        router = Router(local, CircuitBreaker(3, 30.0), ask_again_seconds=0.01)
        result = await router.infer(STRATEGY, Privacy.LOCAL_ONLY, False)
        assert result.answer["fit_score"] >= 0
        await router.aclose()
        return transport

    assert run(scenario()).calls == 3


def test_a_request_dropped_twice_is_sent_again_once_whatever_came_between() -> None:
    """The resend is once per call: a refusal between two drops does not earn a second
    (each dropped call may have lasted a model timeout, and a prompt that crashes the
    model is not sent to it again and again)."""

    async def scenario() -> Faulty:
        drop, refuse = httpx.RemoteProtocolError, httpx.ConnectError
        transport = Faulty(drop, refuse, drop)
        local = ModelClient(ASGI_URL, "dev-heuristic", route=Route.LOCAL, transport=transport)
        router = Router(local, CircuitBreaker(5, 30.0), ask_again_seconds=0.01)
        with pytest.raises(LocalRouteUnavailable, match="model_connection_error"):
            await router.infer(STRATEGY, Privacy.LOCAL_ONLY, False)
        await router.aclose()
        return transport

    assert run(scenario()).calls == 3


def test_a_call_that_found_the_circuit_open_ends_when_its_trial_fails() -> None:
    """A call that waited for the open circuit and ran as its half-open trial ends when the
    trial fails (the model is still down): it does not ask again and wait out one more
    cooldown per failure the breaker counts, which would hold the attempt until its own
    timeout and fail it ``task_timeout`` instead of saying the model is down."""
    transport = Faulty(*[httpx.ConnectError] * 5)

    async def scenario() -> None:
        local = ModelClient(ASGI_URL, "dev-heuristic", route=Route.LOCAL, transport=transport)
        clock = Clock()
        router = Router(local, CircuitBreaker(3, 30.0), clock=clock, ask_again_seconds=0.01)
        for _ in range(3):  # other calls' failures opened the circuit
            another_fails(router, clock())
        waiting = asyncio.create_task(router.infer(STRATEGY, Privacy.LOCAL_ONLY, False))
        await asyncio.sleep(2 * CIRCUIT_POLL_SECONDS)
        assert (waiting.done(), transport.calls) == (False, 0)
        clock.now += 30  # half-open: this call is the trial, and it is refused
        with pytest.raises(LocalRouteUnavailable) as caught:
            await asyncio.wait_for(waiting, 5)  # the frozen clock never half-opens again
        assert caught.value.reason == "model_connection_error"
        assert router.breaker.state(clock()) is CircuitState.OPEN
        await router.aclose()

    run(scenario())
    assert transport.calls == 1


def test_failed_trial_reopens_the_circuit() -> None:
    async def scenario() -> None:
        router, clock = make_router(asgi_client(create_app(fail_mode="500")), threshold=1)
        with pytest.raises(LocalRouteUnavailable, match="model_server_error"):
            await router.infer(STRATEGY, Privacy.LOCAL_ONLY, False)
        clock.now += 30
        with pytest.raises(LocalRouteUnavailable, match="model_server_error"):
            await router.infer(STRATEGY, Privacy.LOCAL_ONLY, False)
        assert router.breaker.state(clock()) is CircuitState.OPEN
        await router.aclose()

    run(scenario())


@pytest.mark.parametrize("fail_mode", ["invalid_json", "schema_mismatch"])
def test_bad_answers_are_not_an_outage(fail_mode: Any) -> None:
    async def scenario() -> None:
        router, clock = make_router(asgi_client(create_app(fail_mode=fail_mode)), threshold=1)
        for _ in range(3):
            with pytest.raises(InvalidModelOutput):
                await router.infer(STRATEGY, Privacy.EXTERNAL_ALLOWED, True)
        assert router.breaker.state(clock()) is CircuitState.CLOSED
        await router.aclose()

    run(scenario())


def test_permanent_rejection_passes_through_the_router() -> None:
    async def scenario() -> None:
        router, clock = make_router(asgi_client(create_app(model="other")), threshold=1)
        with pytest.raises(ModelRequestRejected):
            await router.infer(STRATEGY, Privacy.LOCAL_ONLY, False)
        assert router.breaker.state(clock()) is CircuitState.CLOSED
        await router.aclose()

    run(scenario())


def test_external_route_serves_fallback_operations() -> None:
    async def scenario() -> None:
        external = asgi_client(create_app(), route=Route.EXTERNAL, provider="example-ai")
        local = ModelClient(refused_url(), "dev-heuristic", route=Route.LOCAL)
        router, _ = make_router(local, external)
        request = build_request(CV_REVIEW, JOB, CV)
        result = await router.infer_external(request, Privacy.EXTERNAL_ALLOWED, True)
        assert result.provenance == Provenance("example-ai", "dev-heuristic", "external")
        assert validate_answer(CV_REVIEW, result.answer)
        await router.aclose()

    run(scenario())


@pytest.mark.parametrize(
    ("privacy", "task_allowed", "with_external"),
    [
        (Privacy.LOCAL_ONLY, True, True),
        (Privacy.EXTERNAL_ALLOWED, False, True),
        (Privacy.EXTERNAL_ALLOWED, True, False),
    ],
)
def test_external_route_is_refused_without_permission(
    privacy: Privacy, task_allowed: bool, with_external: bool
) -> None:
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json=completion("{}"))

    async def scenario() -> None:
        external = scripted_client(handler, route=Route.EXTERNAL) if with_external else None
        router, _ = make_router(asgi_client(create_app()), external)
        with pytest.raises(ExternalRouteNotPermitted) as caught:
            await router.infer_external(STRATEGY, privacy, task_allowed)
        assert caught.value.retryable
        await router.aclose()

    run(scenario())
    assert sent == []  # the user's text never left


def test_router_from_settings() -> None:
    local_only = Router.from_settings(Settings(), timeout_seconds=5)
    assert local_only.external is None
    assert local_only.local.url == "http://127.0.0.1:8090/v1/chat/completions"
    assert local_only.local.provenance == Provenance("127.0.0.1", "dev-heuristic", "local")
    assert local_only.local.timeout_seconds == 5  # the bound on the model's silence
    assert local_only.breaker.failure_threshold == 3
    assert local_only.breaker.cooldown_seconds == 30.0

    settings = Settings(
        ai_external_url="http://localhost:9/v1",
        ai_external_model="big-model",
        ai_external_api_key="sk-x",
        ai_circuit_failures=5,
        ai_circuit_cooldown_seconds=2.5,
    )
    both = Router.from_settings(settings)
    assert both.external is not None
    assert both.external.provenance == Provenance("localhost", "big-model", "external")
    assert both.external.timeout_seconds == settings.worker_task_timeout_seconds
    assert both.local.timeout_seconds == settings.worker_task_timeout_seconds
    # The provider's key goes with every external request (the client keeps no other copy).
    assert both.external._http.headers["authorization"] == "Bearer sk-x"
    assert "authorization" not in both.local._http.headers  # never sent to the local model
    assert both.breaker.failure_threshold == 5

    async def close() -> None:
        await local_only.aclose()
        await both.aclose()

    run(close())


# --- what an exchange used (issue 36) ----------------------------------------


class Used(list[tuple[Usage, Provenance]]):
    """An ``on_usage`` that keeps what it was told."""

    def __call__(self, usage: Usage, provenance: Provenance) -> None:
        self.append((usage, provenance))


LLAMA_USAGE = {"prompt_tokens": 41, "completion_tokens": 8, "total_tokens": 49}
LLAMA_TIMINGS = {"prompt_n": 41, "prompt_ms": 120.4, "predicted_n": 8, "predicted_ms": 2979.8}


def test_the_servers_usage_and_timings_are_what_an_exchange_used() -> None:
    # As llama-server streams with include_usage: the finish, then usage with no choices.
    usage_chunk = {"choices": [], "usage": LLAMA_USAGE, "timings": LLAMA_TIMINGS}
    events = [chunk(role="assistant"), *(chunk(piece) for piece in ANSWER_PIECES)]
    body = sse(*events, chunk(finish_reason="stop"), usage_chunk, "data: [DONE]\n\n")
    used = Used()

    async def scenario() -> None:
        async with scripted_client(lambda _: event_stream(body), provider="llama") as client:
            result = await client.complete(InferenceRequest("s", {}, []), on_usage=used)
        assert result.answer == {"ok": [1, 2]}

    run(scenario())
    assert used == [(Usage(41, 8, 3100), Provenance("llama", "dev-heuristic", "local"))]


@pytest.mark.parametrize("huge", ["1e400", "9" * 401])
def test_an_absurd_time_in_the_servers_timings_keeps_the_answer(huge: str) -> None:
    """Read as infinity, or as an integer no float holds, it raised OverflowError while
    the exchange closed, and the answer that had come was lost (a mutation run found it)."""
    timings = f'{{"prompt_ms": 1, "predicted_ms": {huge}}}'
    usage_event = (
        f'data: {{"choices": [], "usage": {json.dumps(LLAMA_USAGE)}, "timings": {timings}}}\n\n'
    )
    events = [chunk(role="assistant"), *(chunk(piece) for piece in ANSWER_PIECES)]
    body = sse(*events, chunk(finish_reason="stop"), usage_event, "data: [DONE]\n\n")
    used = Used()

    async def scenario() -> None:
        async with scripted_client(lambda _: event_stream(body)) as client:
            result = await client.complete(InferenceRequest("s", {}, []), on_usage=used)
        assert result.answer == {"ok": [1, 2]}

    run(scenario())
    ((usage, _),) = used
    assert (usage.prompt_tokens, usage.completion_tokens, usage.model_ms) == (41, 8, MODEL_MS_MAX)


def test_without_the_servers_usage_the_chunks_are_counted_and_the_time_measured() -> None:
    used = Used()

    async def scenario() -> None:
        async with scripted_client(lambda _: event_stream(streamed(ANSWER_PIECES))) as client:
            await client.complete(InferenceRequest("s", {}, []), on_usage=used)

    run(scenario())
    ((usage, _),) = used
    assert (usage.prompt_tokens, usage.completion_tokens) == (0, len(ANSWER_PIECES))
    assert 0 <= usage.model_ms < 10_000  # measured around the exchange


def test_without_the_servers_usage_the_prompt_is_estimated_by_its_scripts() -> None:
    """Japanese text at about 2 characters a token, ASCII at 4 (``budgets.prompt_tokens_of``):
    counted as characters, at 4 a token, it was charged half what it spent."""
    used = Used()
    messages = [
        {"role": "system", "content": "Answer in JSON."},  # 15 ASCII characters
        {"role": "user", "content": "日本語の文章" * 500},  # 3,000 of 3 bytes
    ]

    async def scenario() -> None:
        async with scripted_client(lambda _: event_stream(streamed(ANSWER_PIECES))) as client:
            await client.complete(InferenceRequest("s", {}, messages), on_usage=used)

    run(scenario())
    ((usage, _),) = used
    assert usage.prompt_tokens == 1504  # 15 / 4 + 3,000 / 2, rounded up; 754 at 4 a token


def test_a_whole_completion_reports_its_usage_and_a_bad_answer_costs_its_tokens() -> None:
    body = {**completion("not json"), "usage": LLAMA_USAGE}
    used = Used()

    async def scenario() -> None:
        async with scripted_client(lambda _: httpx.Response(200, json=body)) as client:
            with pytest.raises(InvalidModelOutput):
                await client.complete(InferenceRequest("s", {}, []), on_usage=used)

    run(scenario())
    ((usage, _),) = used
    assert (usage.prompt_tokens, usage.completion_tokens) == (41, 8)


def test_a_request_refused_or_never_received_reports_nothing() -> None:
    used = Used()

    def refusing(_: httpx.Request) -> httpx.Response:
        return httpx.Response(500, json={"error": {"message": "boom"}})

    async def scenario() -> None:
        async with scripted_client(refusing) as client:
            with pytest.raises(ModelServerError):
                await client.complete(InferenceRequest("s", {}, []), on_usage=used)
        async with ModelClient(refused_url(), "m", route=Route.LOCAL) as client:
            with pytest.raises(ModelConnectionError):
                await client.complete(InferenceRequest("s", {}, []), on_usage=used)

    run(scenario())
    assert used == []


def test_a_stream_cut_short_in_transit_reports_the_chunks_it_got() -> None:
    """Neither [DONE] nor a finish reason: the connection was lost mid-answer (the server
    killed, a reset); what came was spent, counted by its content chunks (ADR 38)."""
    used = Used()
    cut = event_stream(sse(chunk(role="assistant"), *(chunk(p) for p in ANSWER_PIECES[:5])))

    async def scenario() -> None:
        async with scripted_client(lambda _: cut) as client:
            with pytest.raises(ModelConnectionError):
                await client.complete(InferenceRequest("s", {}, []), on_usage=used)

    run(scenario())
    ((usage, provenance),) = used
    assert (usage.prompt_tokens, usage.completion_tokens) == (0, 5)
    assert provenance.route == "local"


def test_an_answer_cancelled_or_timed_out_midway_reports_the_chunks_it_got() -> None:
    """The caller's cancel (the owner's) and the exchange's own timeout cut the stream of
    ``stalling_app`` after its first content chunk: that one was spent, and is told."""
    disconnected = threading.Event()
    cancelled, timed_out = Used(), Used()

    async def scenario(url: str) -> None:
        request = InferenceRequest("s", {}, [], max_tokens=10)
        async with ModelClient(url, "m", route=Route.LOCAL, timeout_seconds=30) as client:
            first = asyncio.Event()
            task = asyncio.create_task(
                client.complete(request, on_progress=lambda _: first.set(), on_usage=cancelled)
            )
            await asyncio.wait_for(first.wait(), 5)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        async with ModelClient(url, "m", route=Route.LOCAL, timeout_seconds=0.5) as client:
            with pytest.raises(ModelTimeout):
                await client.complete(request, on_usage=timed_out)

    with serving(stalling_app(disconnected)) as url:
        run(scenario(url))
    for used in (cancelled, timed_out):
        ((usage, _),) = used
        assert (usage.prompt_tokens, usage.completion_tokens) == (0, 1)
        assert usage.model_ms > 0


def test_the_development_model_reports_what_it_sent_through_the_client() -> None:
    used, told = Used(), list[str]()

    async def scenario() -> dict[str, Any]:
        async with asgi_client(create_app()) as client:
            return (await client.complete(STRATEGY, on_usage=used, on_text=told.append)).answer

    answer = run(scenario())
    ((usage, provenance),) = used
    content = json.dumps(answer, ensure_ascii=False)
    assert usage.completion_tokens == len(dev_stream.pieces(content)) == len(told)
    prompt = sum(len(dev_stream.pieces(message["content"])) for message in STRATEGY.messages)
    assert usage.prompt_tokens == prompt
    assert provenance.route == "local"


def test_both_routes_report_usage_and_a_refused_external_route_spends_nothing() -> None:
    local_used, external_used, refused_used = Used(), Used(), Used()

    async def scenario() -> None:
        external = asgi_client(create_app(), route=Route.EXTERNAL, provider="example-ai")
        router, _ = make_router(asgi_client(create_app()), external)
        request = build_request(CV_REVIEW, JOB, CV)
        await router.infer(request, Privacy.LOCAL_ONLY, True, on_usage=local_used)
        await router.infer_external(request, Privacy.EXTERNAL_ALLOWED, True, on_usage=external_used)
        with pytest.raises(ExternalRouteNotPermitted):
            await router.infer_external(request, Privacy.LOCAL_ONLY, True, on_usage=refused_used)
        await router.aclose()

    run(scenario())
    ((local, at_home),) = local_used
    ((external, away),) = external_used
    assert (at_home.route, away.route) == ("local", "external")
    assert away.provider == "example-ai"
    assert local.tokens == external.tokens > 0  # the same answer, counted the same way
    assert refused_used == []
