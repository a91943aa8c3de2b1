"""The router against answers no model took (408, 429) on a real loopback server, on both
routes, and the half-open trial's identity; waits on fake clocks (monotonic, and the wall
clock a Retry-After date is measured on), so nothing here is timed."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime

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
from tests.support.clock import ManualClock

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


# The wall clock's time unless a test moves it: a Retry-After date is measured from it.
NOON = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


def router_on(
    url: str,
    clock: Clock,
    sleep: Sleeps,
    *,
    threshold: int = 3,
    timeout: float = 60.0,
    wall_clock: ManualClock | None = None,
) -> Router:
    """A local route to ``url`` with no external one; waits of ``circuit_wait_seconds`` =
    ``threshold`` x 1 s + 30 s + ``timeout``."""
    local = ModelClient(url, "m", route=Route.LOCAL, timeout_seconds=timeout)
    breaker = CircuitBreaker(threshold, 30.0)
    return Router(
        local,
        breaker,
        clock=clock,
        sleep=sleep,
        wall_clock=wall_clock or ManualClock(NOON),
        ask_again_seconds=1.0,
    )


def external_router_on(url: str, clock: Clock, sleep: Sleeps, wall_clock: ManualClock) -> Router:
    """An external route to ``url``, the local one never asked; the same bound as
    ``router_on``'s, 93 s."""
    local = ModelClient(ASGI_URL, "m", route=Route.LOCAL, timeout_seconds=60.0)
    external = ModelClient(url, "m", route=Route.EXTERNAL, timeout_seconds=60.0)
    breaker = CircuitBreaker(3, 30.0)
    return Router(
        local,
        breaker,
        external,
        clock=clock,
        sleep=sleep,
        wall_clock=wall_clock,
        ask_again_seconds=1.0,
    )


# Refusals that pass the call's wait bound of 93 s, and the waits taken before the call ends.
PAST_THE_BOUND: list[tuple[tuple[Refusal, ...], list[float]]] = [
    (((429, {"Retry-After": "50"}), (429, {"Retry-After": "50"})), [50.0]),
    (((429, {"Retry-After": "86400"}),), []),
    (((429, {"Retry-After": "Mon, 07 Dec 2026 13:00:00 GMT"}),), []),  # NOON + 1 h
]


def on_both_clocks(clock: Clock, wall: ManualClock) -> Sleeps:
    """Sleeps that move the wall clock as well, as a real wait would."""

    def wall_moves(seconds: float) -> None:
        wall.advance(seconds)

    return Sleeps(clock, wall_moves)


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


@pytest.mark.parametrize(("refusals", "waits"), PAST_THE_BOUND)
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


def test_a_retry_after_of_exactly_the_calls_wait_bound_is_waited_out() -> None:
    """A wait that uses the whole of the bound (93 s) still fits: past it is past it."""
    app, answered = answering_after((429, {"Retry-After": "93"}))
    clock = Clock()
    sleeps = Sleeps(clock)

    async def scenario() -> None:
        router = router_on(url, clock, sleeps)
        assert router.circuit_wait_seconds == 93
        assert (await router.infer(UNCHECKED, Privacy.LOCAL_ONLY, False)).answer == {}
        await router.aclose()

    with serving(app) as url:
        run(scenario())
    assert answered == [429, 200]
    assert sleeps.waits == [93.0]


@pytest.mark.parametrize(
    ("retry_after", "waits"),
    [
        ("Mon, 07 Dec 2026 12:00:20 GMT", [20.0]),  # NOON + 20 s
        ("Mon, 07 Dec 2026 12:00:20 -0000", [20.0]),  # GMT spelt as "no zone known"
        ("Monday, 07-Dec-26 12:00:20 GMT", [20.0]),  # RFC 850's form, which RFC 9110 reads
        ("Mon, 07 Dec 2026 11:59:00 GMT", [1.0]),  # passed: no wait but the spacing
        ("Mon, 07 Dec 2026 25:00:00 GMT", [1.0]),  # no date: as if none was named
        ("soon", [1.0]),
    ],
)
def test_a_retry_after_given_as_a_date_is_waited_out_until_then(
    retry_after: str, waits: list[float]
) -> None:
    """RFC 9110 allows the date form; it was taken for no Retry-After, and the call asked
    again after the spacing, before the time the server named."""
    app, answered = answering_after((429, {"Retry-After": retry_after}))
    clock = Clock()
    sleeps = Sleeps(clock)

    async def scenario() -> None:
        router = router_on(url, clock, sleeps)
        result = await router.infer(UNCHECKED, Privacy.LOCAL_ONLY, False)
        assert result.answer == {}
        await router.aclose()

    with serving(app) as url:
        run(scenario())
    assert answered == [429, 200]
    assert sleeps.waits == waits


def test_a_retry_after_date_is_measured_on_the_routers_wall_clock() -> None:
    """A second 429 naming the date the first did, once the wall clock passed it, waits the
    spacing alone: each date is measured from the time it came, on the clock injected."""
    until = {"Retry-After": "Mon, 07 Dec 2026 12:00:20 GMT"}  # NOON + 20 s
    app, answered = answering_after((429, until), (429, until))
    clock, wall = Clock(), ManualClock(NOON)
    sleeps = on_both_clocks(clock, wall)

    async def scenario() -> None:
        router = router_on(url, clock, sleeps, wall_clock=wall)
        await router.infer(UNCHECKED, Privacy.LOCAL_ONLY, False)
        await router.aclose()

    with serving(app) as url:
        run(scenario())
    assert answered == [429, 429, 200]
    assert sleeps.waits == [20.0, 1.0]


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


# --- the external route waits a 429 out the same way ---------------------------------


@pytest.mark.parametrize("retry_after", ["7", "Mon, 07 Dec 2026 12:00:07 GMT"])
def test_the_external_route_waits_out_a_rate_limit_as_the_local_one_does(
    retry_after: str,
) -> None:
    """Before, a 429 ended the external attempt at once, ``model_rate_limited``, and its
    wait was left to the operation's retry delay, which does not read Retry-After."""
    app, answered = answering_after((429, {"Retry-After": retry_after}), (429, {}))
    clock, wall = Clock(), ManualClock(NOON)
    sleeps = on_both_clocks(clock, wall)

    async def scenario() -> None:
        router = external_router_on(url, clock, sleeps, wall)
        result = await router.infer_external(UNCHECKED, Privacy.EXTERNAL_ALLOWED, True)
        assert result.answer == {}
        assert result.provenance.route == "external"
        # No outage of either route: the local breaker never heard of it.
        assert router.breaker.state(clock()) is CircuitState.CLOSED
        assert router.breaker.consecutive_failures == 0
        await router.aclose()

    with serving(app) as url:
        run(scenario())
    assert answered == [429, 429, 200]
    assert sleeps.waits == [7.0, 1.0]


@pytest.mark.parametrize(
    ("refusals", "waits"),
    [*PAST_THE_BOUND, (((429, {}),) * 4, [1.0, 1.0, 1.0])],  # as often as on the local route
)
def test_the_external_route_ends_at_a_rate_limit_past_the_calls_bound(
    refusals: tuple[Refusal, ...], waits: list[float]
) -> None:
    """The same bound as the local route's, 93 s here, and the same number of asks: past
    either, the attempt ends ``model_rate_limited`` for the operation's retries."""
    app, answered = answering_after(*refusals, (200, {}))
    clock = Clock()
    sleeps = Sleeps(clock)

    async def scenario() -> None:
        router = external_router_on(url, clock, sleeps, ManualClock(NOON))
        assert router.circuit_wait_seconds == 93
        with pytest.raises(ModelRateLimited) as caught:
            await router.infer_external(UNCHECKED, Privacy.EXTERNAL_ALLOWED, True)
        assert caught.value.provenance is not None
        assert caught.value.provenance.route == "external"
        await router.aclose()

    with serving(app) as url:
        run(scenario())
    assert answered == [429] * len(refusals)
    assert sleeps.waits == waits


def test_the_external_route_rides_out_the_dev_models_rate_limit() -> None:
    """The development model's 429 drill (Retry-After: 1), lifted while the router waits:
    the analysis is answered in the same call."""
    app = create_app(fail_mode="429")
    clock = Clock()

    def lifted(_seconds: float) -> None:
        app.state.config.fail_mode = None

    sleeps = Sleeps(clock, lifted)

    async def scenario() -> None:
        local = ModelClient(ASGI_URL, "dev-heuristic", route=Route.LOCAL)
        external = ModelClient(url, "dev-heuristic", route=Route.EXTERNAL)
        router = Router(local, CircuitBreaker(3, 30.0), external, clock=clock, sleep=sleeps)
        result = await router.infer_external(STRATEGY, Privacy.EXTERNAL_ALLOWED, True)
        assert result.answer["fit_score"] >= 0
        await router.aclose()

    with serving(app) as url:
        run(scenario())
    assert sleeps.waits == [1.0]


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
