"""An OpenAI-compatible chat-completions client for structured answers.

It sends ``POST {base_url}/chat/completions`` with temperature 0 and the nested
``response_format`` form (``json_schema.schema``: the only one llama.cpp reads),
parses the answer as JSON, lets the request's validator check it, and turns
every failure into one error of ``durable_ops.ai_worker.inference.errors``.

A route that refuses the ``json_schema`` form (llama-cpp-python's server: HTTP
500, it takes only ``json_object`` with a ``schema``) is asked again at once in
that form, within the same bound on silence; when it accepts, the client keeps
that form for the route and logs ``model_response_format_fallback`` once. How a
refusal is told from a real server error: ``inference.response_format``.

It asks for a stream (``"stream": true``) and reads the server-sent events of
``inference.sse`` as they come, so it can tell how far the answer has got:
one chunk with content is about one token, counted against the request's
expected answer size, else its ``max_tokens`` (``model.progress``). On the local
route it also asks llama-server to report how far it has read the prompt
(``"return_progress": true``: chunks with ``prompt_progress``, no content), and
that reading fills the bar's first part before the first answer token; a server
that does not know the field ignores it, and an external route is not asked. A server
that answers in one piece anyway (any content type but ``text/event-stream``)
is read as a whole completion, as is the body of any HTTP error status. Both
forms share the guarantees: a bound on the model's silence, at most 1 MiB of response,
and the same error for the same fault.

The timeout bounds the model's silence, not its total time (ADR 64): the exchange fails
``ModelTimeout`` once ``timeout_seconds`` passed without a sign of progress, a report of
the prompt's reading that moved on or a piece of the answer's text. On CPU the largest
admitted prompt takes longer to read (some 14,000 tokens at about 175 a second) than a
total bound that still caught a hung server soon would allow, while llama-server reports
its reading every batch. Bytes that carry neither sign (comments, keep-alives, empty or
role-only chunks, a whole completion trickled in) do not put it off, so a server that
trickles bytes cannot hold the worker for ever. The total is bounded by the answer's
``max_tokens`` (the server stops there) and the prompt's size (admission's bound), and
whatever the server does, by the worker's attempt-wide timeout (``execution``). An
external route is not asked for its reading: there the bound is its time to the first
answer piece, then the longest gap between two. A server that answers in one piece is
bounded by its time to the whole answer.

A connection that cannot be made is no silence either: a server that is up accepts at once
(on this host in well under a millisecond, a provider's in well under a second), so making
one is bounded apart, by ``CONNECT_TIMEOUT_SECONDS``, and one not made in that time is
``ModelUnreachable``, as a refused one is: nothing was sent, so ``Router.infer`` asks again
and the breaker opens after its failures. Before, a model host that was off or dropped our
packets (a connect that hangs, where a stopped server on a live host refuses at once) held
the attempt for the whole bound on silence, 120 s, and then failed it ``model_timeout``
as a model that had taken the request, every attempt.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import httpx
import structlog

from durable_ops.ai_worker.inference.errors import (
    NOT_RECEIVED,
    InferenceError,
    InvalidModelOutput,
    ModelConnectionError,
    ModelRateLimited,
    ModelRequestRejected,
    ModelServerError,
    ModelTimeout,
    ModelUnreachable,
)
from durable_ops.ai_worker.inference.request import InferenceRequest
from durable_ops.ai_worker.inference.response_format import (
    ResponseFormat,
    refuses_json_schema,
    response_format,
)
from durable_ops.ai_worker.inference.result import InferenceResult
from durable_ops.ai_worker.inference.sse import Event, EventDecoder, MalformedStream
from durable_ops.ai_worker.inference.usage import exchange_usage
from durable_ops.model.bounds import PROVIDER_MAX
from durable_ops.model.drafts import paired
from durable_ops.model.progress import DEFAULT_BUDGET_TOKENS, ProgressMeter
from durable_ops.model.provenance import Provenance
from durable_ops.model.routing import Route
from durable_ops.model.usage import Usage

GENERIC_PROVIDER = "openai-compatible"
DEFAULT_TIMEOUT_SECONDS = 60.0
# The longest making a connection to the model may take (TCP, and TLS for https): it
# covers the first two retransmissions of a lost SYN (1 s and 3 s after it); at most half
# the bound on silence, so the two never race (the module says why it is apart).
CONNECT_TIMEOUT_SECONDS = 10.0
MAX_RESPONSE_BYTES = 1 << 20  # our answers are a few kB; more means a broken server

_log = structlog.get_logger(__name__)

ProgressCallback = Callable[[int], None]
"""Told the percent of a streamed answer received so far (``model.progress``)."""
TextCallback = Callable[[str], None]
"""Told the text of a streamed answer received so far, each time it grew."""
UsageCallback = Callable[[Usage, Provenance], None]
"""Told what one exchange used (``inference.usage``), and on which route and model, once
per exchange the server took, however it ended: a valid answer or not, or one cut short
(cancelled, timed out, its connection lost). An exchange the server refused or never
received tells nothing. Called synchronously, also while a cancel passes: it must be quick."""


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
        connect_timeout_seconds: float = CONNECT_TIMEOUT_SECONDS,
        provider: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if urlsplit(base_url).scheme not in {"http", "https"}:
            raise ValueError("base_url must be an http or https URL")
        if timeout_seconds <= 0:
            raise ValueError("timeout_seconds must be positive")
        if connect_timeout_seconds <= 0:
            raise ValueError("connect_timeout_seconds must be positive")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        # llama-server (the local route) reports the prompt's reading when asked; an
        # external provider is not sent a field it does not know.
        self.reports_reading = route is Route.LOCAL
        self.timeout_seconds = timeout_seconds
        self.connect_timeout_seconds = min(connect_timeout_seconds, timeout_seconds / 2)
        self.provenance = Provenance(
            provider=provider or provider_from_url(base_url), model=model, route=route.value
        )
        self._form = ResponseFormat.JSON_SCHEMA
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.AsyncClient(
            headers=headers,
            timeout=httpx.Timeout(timeout_seconds, connect=self.connect_timeout_seconds),
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

    @property
    def response_format(self) -> ResponseFormat:
        """The structured-output form this route is asked in: json_schema until it refused it."""
        return self._form

    def payload(
        self, request: InferenceRequest, form: ResponseFormat | None = None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [dict(message) for message in request.messages],
            "temperature": 0,
            "stream": True,
            # The server's own token counts in the stream's last chunk (OpenAI, llama.cpp).
            "stream_options": {"include_usage": True},
            "response_format": response_format(
                form or self._form, request.schema_name, request.schema
            ),
        }
        if request.max_tokens is not None:
            body["max_tokens"] = request.max_tokens
        if self.reports_reading:
            body["return_progress"] = True  # llama-server: chunks with prompt_progress
        return body

    async def complete(
        self,
        request: InferenceRequest,
        *,
        on_progress: ProgressCallback | None = None,
        on_text: TextCallback | None = None,
        on_usage: UsageCallback | None = None,
    ) -> InferenceResult:
        """The validated answer to ``request``.

        ``on_progress(percent)`` is called as the server reads the prompt (where it
        reports that) and as a streamed answer arrives, with the
        estimate of ``durable_ops.model.progress`` (1 to 99, each value higher
        than the last), synchronously from the task reading the stream: it must
        be quick. A server that answers in one piece calls it never. ``on_text``
        likewise, with the answer's text so far each time it grew. ``on_usage`` once
        per exchange the server took, before its answer is checked, however it ended:
        an answer that is not valid, or one cut off by a cancel, the timeout or a lost
        connection, cost its tokens too.
        Cancelling the awaiting task closes the connection at once.
        """
        try:
            answer = await self._complete(request, on_progress, on_text, on_usage)
        except InferenceError as exc:
            if exc.provenance is None:
                exc.provenance = self.provenance
            raise
        return InferenceResult(answer=answer, provenance=self.provenance)

    async def _complete(
        self,
        request: InferenceRequest,
        on_progress: ProgressCallback | None,
        on_text: TextCallback | None,
        on_usage: UsageCallback | None,
    ) -> dict[str, Any]:
        budget = request.expected_tokens or request.max_tokens or DEFAULT_BUDGET_TOKENS
        loop = asyncio.get_running_loop()
        # httpx's timeout bounds each phase, and any byte resets its read timeout; this one
        # is put off only by a sign of progress, so a server that trickles bytes cannot
        # hold the worker for ever (the module says what bounds the total).
        try:
            async with asyncio.timeout(self.timeout_seconds) as silence:
                listener = _Listener(
                    ProgressMeter(budget),
                    _ignore_progress if on_progress is None else on_progress,
                    _ignore_text if on_text is None else on_text,
                    _ignore_usage if on_usage is None else on_usage,
                    self.provenance,
                    "".join(message.get("content", "") for message in request.messages),
                    lambda: silence.reschedule(loop.time() + self.timeout_seconds),
                )
                content = await self._ask(request, listener)
        except httpx.ConnectTimeout as exc:
            # No connection, so nothing sent: not the model's silence (the module says why).
            raise ModelUnreachable(
                f"cannot reach the model ({type(exc).__name__})", provenance=self.provenance
            ) from exc
        except (TimeoutError, httpx.TimeoutException) as exc:
            raise ModelTimeout(
                f"the model gave no sign of progress for {self.timeout_seconds:g} seconds",
                provenance=self.provenance,
            ) from exc
        except httpx.ConnectError as exc:
            raise ModelUnreachable(
                f"cannot reach the model ({type(exc).__name__})", provenance=self.provenance
            ) from exc
        except httpx.TransportError as exc:
            raise ModelConnectionError(
                f"lost the model's connection ({type(exc).__name__})", provenance=self.provenance
            ) from exc
        except httpx.DecodingError as exc:  # no TransportError: it escaped as worker_error
            raise InvalidModelOutput(
                "the model's answer is not in the encoding it named", provenance=self.provenance
            ) from exc
        answer = _content_object(content)
        return request.validate(answer) if request.validate else answer

    async def _ask(self, request: InferenceRequest, listener: _Listener) -> str:
        """The answer's text, in the route's form; once more as json_object if it refuses."""
        form = self._form
        try:
            return await self._exchange(
                self.payload(request, form),
                listener,
                refusable=form is ResponseFormat.JSON_SCHEMA,
            )
        except _JsonSchemaRefused as refused:
            fallback = ResponseFormat.JSON_OBJECT
            adopt = functools.partial(self._adopt, fallback, refused.status)
            return await self._exchange(
                self.payload(request, fallback), listener, on_accepted=adopt
            )

    async def _exchange(
        self,
        payload: dict[str, Any],
        listener: _Listener,
        *,
        refusable: bool = False,
        on_accepted: Callable[[], None] | None = None,
    ) -> str:
        """The answer's text content: from the event stream, or from a whole completion.

        ``refusable``: an error response that refuses the json_schema form raises
        ``_JsonSchemaRefused`` instead of its error. ``on_accepted`` is called once
        the status says the request was taken.

        Once the server took the request, the exchange tells ``listener`` what it used
        however it ends: a finished answer, and also one cut off by the caller's cancel,
        the bound on its silence, a lost connection or a broken stream, with what the server
        said of it (its ``usage`` comes last, so a cut-off stream is counted by the content
        chunks received and its prompt estimated, as a server that sends none: ADR 38, 57).
        Otherwise cancelling
        an answer before its end would make it free (the daily budget's ``spent``). A
        request the server refused (an HTTP error status) or never received used nothing.
        """
        started = time.monotonic()
        stream: _ChunkStream | None = None  # set once the server took the request
        try:
            async with self._http.stream("POST", self.url, json=payload) as response:
                if response.status_code >= 300:
                    body = await _read(response)  # as a whole, whatever its type
                    # Looked at only to tell a refusal of the json_schema form; never kept.
                    if refusable and refuses_json_schema(response.status_code, body):
                        raise _JsonSchemaRefused(response.status_code)
                    _raise_for_status(response)
                if on_accepted is not None:
                    on_accepted()
                stream = _ChunkStream()
                if _media_type(response) != "text/event-stream":
                    return _message_content(await _read(response), stream)
                return await _streamed_content(response, listener, stream)
        finally:
            # Also while a CancelledError or TimeoutError passes: what reached the model
            # was spent whether or not the answer was waited for.
            if stream is not None:
                listener.used(stream, time.monotonic() - started)

    def _adopt(self, form: ResponseFormat, refused_status: int) -> None:
        """Keep ``form`` for this route from now on; say so once."""
        if self._form is form:
            return  # a concurrent request got there first
        self._form = form
        _log.warning(
            "model_response_format_fallback",
            route=self.provenance.route,
            model=self.model,
            url=self.url,
            refused=ResponseFormat.JSON_SCHEMA.value,
            refused_status=refused_status,
            using=form.value,
        )


class _JsonSchemaRefused(Exception):
    """The route answered a json_schema request by refusing that form (never escapes)."""

    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status} refusing json_schema")
        self.status = status


def _ignore_text(text: str) -> None:
    pass


def _ignore_progress(percent: int) -> None:
    pass


def _ignore_usage(usage: Usage, provenance: Provenance) -> None:
    pass


@dataclass(frozen=True)
class _Listener:
    """Who is told how a streamed answer grows (its percent when it rose, its text), each
    sign of progress (the bound on silence) and what a finished exchange used."""

    meter: ProgressMeter
    progress: ProgressCallback
    text: TextCallback
    usage: UsageCallback
    provenance: Provenance
    prompt_text: str  # what the prompt is estimated from when the server does not count it
    alive: Callable[[], None]  # puts off the bound on silence

    def grew(self, stream: _ChunkStream) -> None:
        percent = self.meter.observe(stream.tokens)
        if percent is not None:
            self.progress(percent)
        self.text(stream.content())

    def read(self, reading: _Reading) -> None:
        percent = self.meter.read(reading.processed, reading.total, reading.cache)
        if percent is not None:
            self.progress(percent)

    def used(self, stream: _ChunkStream, seconds: float) -> None:
        usage = exchange_usage(
            stream.usage,
            stream.timings,
            counted_tokens=stream.tokens,
            measured_seconds=seconds,
            prompt_text=self.prompt_text,
        )
        self.usage(usage, self.provenance)


class _Bounded:
    """Counts a response body as it arrives and refuses it beyond ``MAX_RESPONSE_BYTES``."""

    def __init__(self) -> None:
        self.size = 0

    def add(self, chunk: bytes) -> bytes:
        self.size += len(chunk)
        if self.size > MAX_RESPONSE_BYTES:
            raise InvalidModelOutput("response larger than 1 MiB")
        return chunk


async def _read(response: httpx.Response) -> bytes:
    bound = _Bounded()
    return b"".join([bound.add(chunk) async for chunk in response.aiter_bytes()])


def _media_type(response: httpx.Response) -> str:
    content_type: str = response.headers.get("content-type", "")
    return content_type.partition(";")[0].strip().lower()


def _raise_for_status(response: httpx.Response) -> None:
    status = response.status_code
    if status == 429:
        raise _rate_limited(response.headers.get("retry-after", ""))
    if status >= 500 or status in NOT_RECEIVED:
        raise ModelServerError(status)
    raise ModelRequestRejected(status)


def _rate_limited(retry_after: str) -> ModelRateLimited:
    """A 429 with its ``Retry-After``: seconds, or an HTTP date (RFC 9110, 10.2.3), which
    the router measures on its own wall clock. Anything else is no wait named, and the
    router waits its usual spacing."""
    try:
        seconds = float(retry_after)
    except ValueError:
        return ModelRateLimited(None, retry_at=_http_date(retry_after))
    return ModelRateLimited(seconds if seconds >= 0 else None)


def _http_date(value: str) -> datetime | None:
    try:
        when = parsedate_to_datetime(value)
    except (ValueError, OverflowError):  # a year past C's long overflows, not just a bad one
        return None
    # An HTTP date is always GMT; "-0000" (and the asctime form) come back naive.
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


async def _streamed_content(
    response: httpx.Response, listener: _Listener, stream: _ChunkStream
) -> str:
    """The content of ``chat.completion.chunk`` events, reporting progress as it grows.

    The stream ends at ``data: [DONE]``, or at its end once a chunk gave the
    ``finish_reason`` (some servers omit ``[DONE]``). A stream that ends with
    neither was cut short in transit, like a reset connection: that is
    ``ModelConnectionError``, so the answer is tried again and the breaker
    counts it. A failure the server reports inside the stream is
    ``InvalidModelOutput``: it answered, with something that is not an answer.
    """
    bound, decoder = _Bounded(), EventDecoder()
    try:
        async for data in response.aiter_bytes():
            for event in decoder.feed(bound.add(data)):
                tokens, reading, signs = stream.tokens, stream.reading, stream.signs
                if stream.take(event):
                    return stream.content()
                if stream.signs > signs:
                    listener.alive()
                if stream.reading != reading and stream.reading is not None:
                    listener.read(stream.reading)
                if stream.tokens != tokens:
                    listener.grew(stream)
        for event in decoder.close():
            if stream.take(event):
                return stream.content()
    except MalformedStream as exc:
        raise InvalidModelOutput(str(exc)) from exc
    if stream.finish_reason is None:
        raise ModelConnectionError("the stream ended before the answer was finished")
    return stream.content()


@dataclass(frozen=True)
class _Reading:
    """How far the server has read the prompt (llama-server's ``prompt_progress``)."""

    total: int
    cache: int
    processed: int

    @property
    def done(self) -> int:
        """The tokens read: a report beyond the total says no more (the prompt's size)."""
        return min(self.processed, self.total)

    @classmethod
    def of(cls, value: object) -> _Reading | None:
        """The report in ``value``, or None for anything else: a report is a courtesy, one
        the client cannot read is passed over, never an error."""
        if not isinstance(value, dict):
            return None
        total, cache, processed = (
            _count(value.get("total")),
            _count(value.get("cache", 0)),
            _count(value.get("processed")),
        )
        if total is None or cache is None or processed is None or total < 1:
            return None
        return cls(total, cache, processed)


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class _ChunkStream:
    """What the chunks of one streamed completion said so far."""

    def __init__(self) -> None:
        self.reading: _Reading | None = None  # the last report of the prompt's reading
        self.most_read = -1  # the most of the prompt any report said was read
        self.pieces: list[str] = []
        self.tokens = 0
        self.finish_reason: str | None = None
        self.usage: object = None  # the server's ``usage`` and ``timings``, as it sent them
        self.timings: object = None

    def content(self) -> str:
        # A server that escapes its text may send an emoji's two halves in two chunks.
        return paired("".join(self.pieces))

    @property
    def signs(self) -> int:
        """Signs of progress so far: pieces of the answer's text, and tokens of the prompt
        read (each report that read further adds what it read beyond the last)."""
        return len(self.pieces) + self.most_read

    def take(self, event: Event) -> bool:
        """Read one event; True when it ended the stream."""
        if event.name == "error":
            raise InvalidModelOutput("the model reported an error in its stream")
        if event.data.strip() == "[DONE]":
            return True
        try:
            chunk = json.loads(event.data)
        except ValueError:
            raise InvalidModelOutput("stream event is not a JSON chunk") from None
        if not isinstance(chunk, dict):
            raise InvalidModelOutput("stream event is not a JSON chunk")
        if "error" in chunk:
            raise InvalidModelOutput("the model reported an error in its stream")
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            raise InvalidModelOutput("stream chunk is not a chat completion chunk")
        if choices:  # the usage-only chunk of some servers has none
            self._choice(choices[0])
        self._usage(chunk.get("usage"))
        self.timings = chunk.get("timings", self.timings)
        reading = _Reading.of(chunk.get("prompt_progress"))
        if reading is not None:
            self.reading = reading
            self.most_read = max(self.most_read, reading.done)
        return False

    def _choice(self, choice: object) -> None:
        delta = (choice.get("delta") or {}) if isinstance(choice, dict) else None
        if not isinstance(choice, dict) or not isinstance(delta, dict):
            raise InvalidModelOutput("stream chunk is not a chat completion chunk")
        content = delta.get("content")
        if content is not None and not isinstance(content, str):
            raise InvalidModelOutput("answer has no text content")
        if content:
            self.pieces.append(content)
            self.tokens += 1  # one chunk with content is about one token
        finish_reason = choice.get("finish_reason")
        if finish_reason == "length":
            raise InvalidModelOutput("answer was cut off at the token limit")
        if finish_reason is not None:
            self.finish_reason = str(finish_reason)

    def _usage(self, usage: object) -> None:
        if usage is None:
            return
        self.usage = usage
        # The server's own count, where it gives one, is the better estimate.
        counted = usage.get("completion_tokens") if isinstance(usage, dict) else None
        if isinstance(counted, int) and not isinstance(counted, bool):
            self.tokens = max(self.tokens, counted)


def _message_content(body: bytes, stream: _ChunkStream) -> str:
    """The text in ``choices[0].message.content`` of a whole completion; its ``usage`` and
    ``timings`` noted on ``stream``."""
    try:
        completion = json.loads(body)
        choice = completion["choices"][0]
        content = choice["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise InvalidModelOutput("response is not a chat completion") from exc
    stream.usage, stream.timings = completion.get("usage"), completion.get("timings")
    if choice.get("finish_reason") == "length":
        raise InvalidModelOutput("answer was cut off at the token limit")
    if not isinstance(content, str):
        raise InvalidModelOutput("answer has no text content")
    return content


def _content_object(content: str) -> dict[str, Any]:
    """The JSON object the answer's text must be."""
    try:
        answer = json.loads(content)
    except ValueError as exc:
        raise InvalidModelOutput("answer is not JSON") from exc
    if not isinstance(answer, dict):
        raise InvalidModelOutput("answer is not a JSON object")
    try:  # the model's own JSON may spell half a character (``"\\ud83d"``): no text
        json.dumps(answer, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        raise InvalidModelOutput("answer holds half a character") from None
    return answer
