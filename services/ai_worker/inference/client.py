"""An OpenAI-compatible chat-completions client for structured answers.

It sends ``POST {base_url}/chat/completions`` with temperature 0 and the nested
``response_format`` form (``json_schema.schema``: the only one llama.cpp reads),
parses the answer as JSON, lets the request's validator check it, and turns
every failure into one error of ``durable_ops.ai_worker.inference.errors``.
"""

from __future__ import annotations

import asyncio
import json
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import httpx

from durable_ops.ai_worker.inference.errors import (
    InferenceError,
    InvalidModelOutput,
    ModelConnectionError,
    ModelRateLimited,
    ModelRequestRejected,
    ModelServerError,
    ModelTimeout,
)
from durable_ops.ai_worker.inference.request import InferenceRequest
from durable_ops.ai_worker.inference.result import InferenceResult, Provenance
from durable_ops.model.bounds import PROVIDER_MAX
from durable_ops.model.routing import Route

GENERIC_PROVIDER = "openai-compatible"
DEFAULT_TIMEOUT_SECONDS = 60.0
MAX_RESPONSE_BYTES = 1 << 20  # our answers are a few kB; more means a broken server


def provider_from_url(base_url: str) -> str:
    """The URL's host names the provider when it fits the provenance column."""
    host = (urlsplit(base_url).hostname or "").lower()
    if host and len(host) <= PROVIDER_MAX:
        return host
    return GENERIC_PROVIDER


class ModelClient:
    """One route to one model. Use it as an async context manager or ``aclose()`` it."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        route: Route,
        api_key: str = "",
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
        provider: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if urlsplit(base_url).scheme not in {"http", "https"}:
            raise ValueError("base_url must be an http or https URL")
        if timeout_seconds <= 0:
            raise ValueError("timeout_seconds must be positive")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.timeout_seconds = timeout_seconds
        self.provenance = Provenance(
            provider=provider or provider_from_url(base_url), model=model, route=route.value
        )
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.AsyncClient(
            headers=headers,
            timeout=httpx.Timeout(timeout_seconds),
            follow_redirects=False,
            transport=transport,
        )

    async def __aenter__(self) -> ModelClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    def payload(self, request: InferenceRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [dict(message) for message in request.messages],
            "temperature": 0,
            "stream": False,
            "response_format": {
                "type": "json_schema",
                "json_schema": {
                    "name": request.schema_name,
                    "strict": True,
                    "schema": request.schema,
                },
            },
        }
        if request.max_tokens is not None:
            body["max_tokens"] = request.max_tokens
        return body

    async def complete(self, request: InferenceRequest) -> InferenceResult:
        try:
            answer = await self._complete(request)
        except InferenceError as exc:
            if exc.provenance is None:
                exc.provenance = self.provenance
            raise
        return InferenceResult(answer=answer, provenance=self.provenance)

    async def _complete(self, request: InferenceRequest) -> dict[str, Any]:
        # httpx's timeout bounds each phase; this one bounds the whole exchange,
        # so a server that trickles bytes cannot hold the worker forever.
        try:
            async with asyncio.timeout(self.timeout_seconds):
                status, headers, body = await self._post(self.payload(request))
        except (TimeoutError, httpx.TimeoutException) as exc:
            raise ModelTimeout(
                f"no answer within {self.timeout_seconds:g} seconds", provenance=self.provenance
            ) from exc
        except httpx.TransportError as exc:
            raise ModelConnectionError(
                f"cannot reach the model ({type(exc).__name__})", provenance=self.provenance
            ) from exc
        if status == 429:
            raise ModelRateLimited(_retry_after(headers), provenance=self.provenance)
        if status >= 500:
            raise ModelServerError(status, provenance=self.provenance)
        if status >= 300:
            raise ModelRequestRejected(status, provenance=self.provenance)
        answer = _answer_object(body)
        return request.validate(answer) if request.validate else answer

    async def _post(self, payload: dict[str, Any]) -> tuple[int, httpx.Headers, bytes]:
        async with self._http.stream("POST", self.url, json=payload) as response:
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > MAX_RESPONSE_BYTES:
                    raise InvalidModelOutput("response larger than 1 MiB")
                chunks.append(chunk)
            return response.status_code, response.headers, b"".join(chunks)


def _retry_after(headers: httpx.Headers) -> float | None:
    try:
        seconds = float(headers.get("retry-after", ""))
    except ValueError:
        return None  # absent, or an HTTP date: the worker's own backoff applies
    return seconds if seconds >= 0 else None


def _answer_object(body: bytes) -> dict[str, Any]:
    """The JSON object in ``choices[0].message.content`` of a completion."""
    try:
        completion = json.loads(body)
        choice = completion["choices"][0]
        content = choice["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise InvalidModelOutput("response is not a chat completion") from exc
    if choice.get("finish_reason") == "length":
        raise InvalidModelOutput("answer was cut off at the token limit")
    if not isinstance(content, str):
        raise InvalidModelOutput("answer has no text content")
    try:
        answer = json.loads(content)
    except ValueError as exc:
        raise InvalidModelOutput("answer is not JSON") from exc
    if not isinstance(answer, dict):
        raise InvalidModelOutput("answer is not a JSON object")
    return answer
