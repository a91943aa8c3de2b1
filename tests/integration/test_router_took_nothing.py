"""The router against answers no model took (408, 429) on a real loopback server, and the
half-open trial's identity; waits on a fake clock, so nothing here is timed."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx
import pytest
from starlette import routing
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse

from durable_ops.ai_worker.inference import (
    InferenceError,
    LocalRouteUnavailable,
    ModelClient,
    ModelRateLimited,
    ModelRequestRejected,
    ModelServerError,
    Router,
)
from durable_ops.ai_worker.inference.router import CIRCUIT_POLL_SECONDS
from durable_ops.dev_model import create_app
from durable_ops.model.circuit import CircuitBreaker, CircuitState, Ticket
from durable_ops.model.routing import Route
from durable_ops.model.states import Privacy
from tests.integration.test_inference_client import (
    ASGI_URL,
    STRATEGY,
    UNCHECKED,
    Clock,
    another_fails,
    asgi_client,
    completion,
    run,
    serving,
)

Refusal = tuple[int, dict[str, str]]  # a status and its headers


def answering_after(*refusals: Refusal) -> tuple[Starlette, list[int]]:
    """A model server that answers ``refusals`` in turn, then a whole completion of
    ``{}``; and the statuses it answered, in order."""
    answered: list[int] = []

    async def chat(request: Request) -> JSONResponse:
        await request.body()
        if len(answered) < len(refusals):
            status, headers = refusals[len(answered)]
            answered.append(status)
            body = {"error": {"message": "scripted"}}
            return JSONResponse(body, status_code=status, headers=headers)
        answered.append(200)
        return JSONResponse(completion("{}"))

    app = Starlette(routes=[routing.Route("/v1/chat/completions", chat, methods=["POST"])])
    return app, answered


class Sleeps:
    """The router's sleep on the test's clock: each wait is noted and passes at once, after
    ``then`` (what happens meanwhile) is called with it."""

    def __init__(self, clock: Clock, then: Callable[[float], None] | None = None) -> None:
        self.clock, self.then = clock, then
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.clock.now += seconds
        if self.then is not None:
            self.then(seconds)
        await asyncio.sleep(0)


def router_on(
    url: str, clock: Clock, sleep: Sleeps, *, threshold: int = 3, timeout: float = 60.0
) -> Router:
    """A local route to ``url`` with no external one; waits of ``circuit_wait_seconds`` =
    ``threshold`` x 1 s + 30 s + ``timeout``."""
    local = ModelClient(url, "m", route=Route.LOCAL, timeout_seconds=timeout)
    breaker = CircuitBreaker(threshold, 30.0)
    return Router(local, breaker, clock=clock, sleep=sleep, ask_again_seconds=1.0)


# --- 408: the server gave up waiting for the request ----------------------------------


@pytest.mark.parametrize(
    ("status", "error", "took_nothing"),
    [
        (408, ModelServerError, True),  # the request never arrived whole
        (503, ModelServerError, True),
        (500, ModelServerError, False),
        (425, ModelRequestRejected, False),  # only for early data, which httpx never sends
        (429, ModelRateLimited, True),
    ],
)
def test_a_status_says_whether_the_model_took_the_request(
    status: int, error: type[InferenceError], took_nothing: bool
) -> None:
    app, _ = answering_after((status, {}))

    async def scenario() -> None:
        async with ModelClient(url, "m", route=Route.LOCAL) as client:
            with pytest.raises(error) as caught:
                await client.complete(UNCHECKED)
        assert caught.value.took_nothing is took_nothing
        assert caught.value.retryable is (error is not ModelRequestRejected)

    with serving(app) as url:
        run(scenario())


def test_a_408_is_asked_again_within_the_call() -> None:
    app, answered = answering_after((408, {}))
    clock = Clock()
    sleeps = Sleeps(clock)

    async def scenario() -> None:
        router = router_on(url, clock, sleeps)
        result = await router.infer(UNCHECKED, Privacy.LOCAL_ONLY, False)
        assert result.answer == {}
        assert router.breaker.consecutive_failures == 0  # the answer closed the count
        await router.aclose()

    with serving(app) as url:
        run(scenario())
    assert answered == [408, 200]
    assert sleeps.waits == [1.0]


# --- 429: asked again once its Retry-After passed, and no outage -----------------------


def test_a_rate_limited_call_is_asked_again_once_its_retry_after_passed() -> None:
    """No sooner than the server asked (7 s, longer than the 1 s spacing), or after the
    spacing when it named no time; the 429s never counted as failures."""
    app, answered = answering_after((429, {"Retry-After": "7"}), (429, {}))
    clock = Clock()
    counted: list[int] = []

    def look(_seconds: float) -> None:
        counted.append(router.breaker.consecutive_failures)

    sleeps = Sleeps(clock, look)

    async def scenario() -> None:
        result = await router.infer(UNCHECKED, Privacy.LOCAL_ONLY, False)
        assert result.answer == {}
        assert router.breaker.state(clock()) is CircuitState.CLOSED
        await router.aclose()

    with serving(app) as url:
        router = router_on(url, clock, sleeps, threshold=2)
        run(scenario())
    assert answered == [429, 429, 200]
    assert sleeps.waits == [7.0, 1.0]
    assert counted == [0, 0]


@pytest.mark.parametrize(
    ("refusals", "waits"),
    [
        (((429, {"Retry-After": "50"}), (429, {"Retry-After": "50"})), [50.0]),
        (((429, {"Retry-After": "86400"}),), []),
    ],
)
def test_a_retry_after_past_the_calls_wait_bound_ends_the_call(
    refusals: tuple[Refusal, ...], waits: list[float]
) -> None:
    """The call's waits are bounded by ``circuit_wait_seconds`` (here 3 + 30 + 60 = 93 s):
    a second 50 s wait would pass it, so the attempt ends ``model_rate_limited`` at once,
    as it does at a Retry-After of a day, rather than sleeping into its own timeout."""
    app, answered = answering_after(*refusals)
    clock = Clock()
    sleeps = Sleeps(clock)

    async def scenario() -> None:
        router = router_on(url, clock, sleeps)
        assert router.circuit_wait_seconds == 93
        with pytest.raises(LocalRouteUnavailable) as caught:
            await router.infer(UNCHECKED, Privacy.LOCAL_ONLY, False)
        assert caught.value.reason == "model_rate_limited"
        assert not caught.value.fallback_permitted
        assert isinstance(caught.value.__cause__, ModelRateLimited)
        await router.aclose()

    with serving(app) as url:
        run(scenario())
    assert answered == [429] * len(refusals)
    assert sleeps.waits == waits


def test_the_wait_for_the_circuit_gets_what_the_retry_afters_left() -> None:
    """A call that waited out a 50 s Retry-After and then found the circuit open (other
    calls' failures) waits for it at most the 43 s left of its 93 s bound; here another
    call holds the half-open trial, so the wait ends ``circuit_open``. Without the bound
    it waited on until that trial expired, 60 s after the circuit opened, past its own."""
    app, answered = answering_after((429, {"Retry-After": "50"}))
    clock = Clock()
    trials: list[Ticket] = []

    def meanwhile(seconds: float) -> None:
        if seconds == 50:  # the model went down for other calls
            for _ in range(3):
                another_fails(router, clock())
        elif not trials and (trial := router.breaker.allow(clock())) is not None:
            trials.append(trial)  # another call took the trial and holds it

    sleeps = Sleeps(clock, meanwhile)

    async def scenario() -> None:
        with pytest.raises(LocalRouteUnavailable, match="circuit_open"):
            await router.infer(UNCHECKED, Privacy.LOCAL_ONLY, False)
        await router.aclose()

    with serving(app) as url:
        router = router_on(url, clock, sleeps)
        run(scenario())
    assert answered == [429]
    assert trials
    assert sum(sleeps.waits) <= router.circuit_wait_seconds + CIRCUIT_POLL_SECONDS


def test_a_rate_limit_is_no_outage() -> None:
    """A 429 neither opens the circuit (it may fall back, and does so at once) nor keeps it
    open: a trial rate-limited found the route up."""
    app, answered = answering_after((429, {}), (429, {}))
    clock = Clock()

    async def scenario() -> None:
        local = ModelClient(url, "m", route=Route.LOCAL)
        external = asgi_client(create_app(), route=Route.EXTERNAL)
        router = Router(local, CircuitBreaker(1, 30.0), external, clock=clock)
        with pytest.raises(LocalRouteUnavailable) as caught:
            await router.infer(UNCHECKED, Privacy.EXTERNAL_ALLOWED, True)
        assert caught.value.fallback_permitted
        assert caught.value.reason == "model_rate_limited"
        assert router.breaker.state(clock()) is CircuitState.CLOSED

        another_fails(router, clock())
        clock.now += 30  # half-open: this call is the trial
        with pytest.raises(LocalRouteUnavailable, match="model_rate_limited"):
            await router.infer(UNCHECKED, Privacy.EXTERNAL_ALLOWED, True)
        assert router.breaker.state(clock()) is CircuitState.CLOSED
        await router.aclose()

    with serving(app) as url:
        run(scenario())
    assert answered == [429, 429]


# --- the half-open trial is one call -------------------------------------------------


class Held(httpx.AsyncBaseTransport):
    """Holds each request until the test says: dropped (as a restarting model server
    drops what it held) or answered by the development model."""

    def __init__(self) -> None:
        self.arrived: asyncio.Queue[asyncio.Future[bool]] = asyncio.Queue()
        self._model = httpx.ASGITransport(create_app())

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        answer: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        await self.arrived.put(answer)
        if not await answer:
            raise httpx.RemoteProtocolError("Server disconnected", request=request)
        return await self._model.handle_async_request(request)


def test_a_call_admitted_before_the_outage_failing_late_leaves_the_trial_to_judge() -> None:
    """A call the model held since before the circuit opened fails while the half-open
    trial runs: the circuit stays half-open (before, it reopened for a whole cooldown,
    and a call waiting for it failed ``circuit_open``), and the trial's answer closes it."""

    async def scenario() -> None:
        transport = Held()
        local = ModelClient(ASGI_URL, "dev-heuristic", route=Route.LOCAL, transport=transport)
        external = asgi_client(create_app(), route=Route.EXTERNAL)
        clock = Clock()
        router = Router(local, CircuitBreaker(1, 30.0), external, clock=clock)
        early = asyncio.create_task(router.infer(STRATEGY, Privacy.EXTERNAL_ALLOWED, True))
        early_answer = await transport.arrived.get()
        another_fails(router, clock())  # the model went down
        clock.now += 30
        trial = asyncio.create_task(router.infer(STRATEGY, Privacy.LOCAL_ONLY, False))
        trial_answer = await transport.arrived.get()

        early_answer.set_result(False)  # dropped, late
        with pytest.raises(LocalRouteUnavailable, match="model_connection_error"):
            await early
        assert router.breaker.state(clock()) is CircuitState.HALF_OPEN
        assert router.breaker.allow(clock()) is None  # the trial is still out

        trial_answer.set_result(True)
        assert (await trial).answer["fit_score"] >= 0
        assert router.breaker.state(clock()) is CircuitState.CLOSED
        await router.aclose()

    run(scenario())
