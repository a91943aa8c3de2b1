"""Local-first routing of inferences over the configured model routes (AI-002).

A local-route worker calls ``infer``: the local model, guarded by the circuit
breaker. When the local route is down or its circuit open, ``infer`` raises
``LocalRouteUnavailable`` saying whether the operation may fall back to the
external route; it never calls the external model itself, because the
fallback is a state of the operation that a worker holding the external
route claims and serves with ``infer_external``.

An open circuit that leaves an operation nowhere else to go (no fallback
permitted) does not fail its attempt at once: ``infer`` waits, holding the
attempt (its lease beats on, a cancel still stops it), for the circuit to admit
a call, at most one cooldown (``OPS_AI_CIRCUIT_COOLDOWN_SECONDS``), and then asks
the model as the half-open trial. A ``circuit_open`` refusal never reached the
model, yet it spent an attempt. The figure that needs the wait, from an outside
test of a short model-server outage: attempts 1 and 2 failed
``model_connection_error``, attempt 3 was claimed ~11 s later while the circuit
was still open (30 s cooldown) and failed ``circuit_open`` at once, so the
analysis ended ``failed`` ~26 s into the outage, before the model was back.
Waiting, the third attempt runs as the trial once the circuit half-opens, 30 s
after it opened, so the analysis survives a model outage of about 30 s
(tests/integration/test_ai_worker_outage.py: a model that refuses connections,
then comes back). Only a circuit that opened again after its cooldown (another
attempt's trial failed: the model is still down) fails the waiting attempt
``circuit_open``, so a long outage still ends its analyses. Waiting was chosen over giving the
operation back (a release spends no attempt): the worker would claim it again
at once and release it again, over and over until the circuit half-opened.

With the default breaker (3 failures open it) waiting alone was not enough: each
attempt failed once, so a lone analysis spent its 3 attempts on refused connections
in about 26 s and failed before the circuit ever opened. A connection that could not
be made, or a 503 (llama-server loading its model), reached no model
(``took_nothing``), so with no fallback permitted ``infer`` asks again within the
attempt, ``ASK_AGAIN_SECONDS`` apart, until the failures open the circuit, and then
waits for it as above: one attempt rides out a model server's restart of about 3 s +
the 30 s cooldown, and the analysis's three about 90 s
(tests/integration/test_ai_worker_outage.py; ADR 59). The spacing keeps a blip of a
second from opening the circuit for a whole cooldown. A connection not made within the
client's connect bound (``CONNECT_TIMEOUT_SECONDS``: a model host that is off, or drops
our packets) reached no model either, and is asked again the same way, each try then
lasting that bound: before, it was waited for as long as the model may be silent (120 s)
and failed the attempt ``model_timeout`` at once, three attempts of two minutes each at
0 % before the breaker even opened.

So the minute and a half or so that an analysis shows no progress while a refusing model
stays down is this bound, on purpose: the first attempt asks three times and waits out
the cooldown for its trial (some 33 s), each later one waits for the circuit's next
half-open and is its trial, with the retry delays between them; the third trial fails
the analysis about three cooldowns into the outage (95 s measured with the defaults, under
``opsctl up`` with the local route on a port nothing listens on). Failing each attempt at
once instead spent the three attempts in about 26 s, before a restarting model was back
(ADR 59). What the owner sees meanwhile is the analysis running with no sign of progress
from the model: the page says it waits for the model (and which attempt, once it is a
retry), not a bar stuck at 0 %.

A model server killed or restarted while it held the request (mid-prompt or
mid-answer) drops the connection instead of refusing it: httpx's
``RemoteProtocolError`` ("Server disconnected without sending a response", or a body
cut short), a ``ReadError`` on a reset, or a stream that ended unfinished, all
``model_connection_error``. The model had taken the request, so it was not asked
again, and the attempt ended at once (an outside test: llama-server stopped mid-prompt,
a new one listening 18 s later, the old one dropped the request 8 s after that, 30 s
after it came, and the attempt failed ``model_connection_error``). With no fallback
permitted such a call is sent again, from scratch, like a refused one (the breaker
counts it as one failure), so a restart mid-request is ridden out like a restart between
requests (tests/integration/test_ai_worker_outage.py). Once per ``infer``: a dropped
call may have lasted up to a model timeout, so once, and the attempt's own
timeout (the task timeout plus ``circuit_wait_seconds``, ``ai_worker.execution``) bounds
it whatever the model does, and a prompt that crashes the model is not sent to it again
and again. An answer that had begun streaming starts
over: the draft, sent whole on each beat, is replaced by the new answer's text at its
first piece (until then it shows the old one's start), and progress holds at its highest
until the new answer passes it; both exchanges' tokens are counted.

A 408 (the server, or a proxy before it, gave up waiting for the request to arrive)
took nothing either, and is asked again as a 503 is. So is a 429 (rate limited), but no
sooner than its ``Retry-After`` (at least the usual spacing; one given as an HTTP date is
measured on the router's wall clock, a date passed being no wait), and it is no failure
for the breaker: the route answered, so a 429 counts as an answer, it neither opens the
circuit nor keeps it open (a rate limit says we asked too often, not that the model is
down; opening would hold every call a whole cooldown, or send it to the external route,
over a limit that may lift in a second: ADR 68). All of one call's waits, the spacings,
each ``Retry-After`` and the wait for the circuit, come out of one bound,
``circuit_wait_seconds``, which the attempt's own timeout includes: a ``Retry-After`` that
would pass what is left of it (a provider's "come back in an hour") ends the attempt at
once, ``model_rate_limited``, and the operation's retries take it from there, rather than
the attempt sleeping until its timeout cut it off as ``task_timeout``. ``infer_external``
waits out a 429 the same way, within the same bound, through the same code: before, a
provider's rate limit ended the external attempt at once and its wait was left to the
operation's retry delay, which does not read ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime

import structlog

from durable_ops.ai_worker.inference.client import (
    ModelClient,
    ProgressCallback,
    TextCallback,
    UsageCallback,
)
from durable_ops.ai_worker.inference.errors import (
    ExternalRouteNotPermitted,
    InferenceError,
    LocalRouteUnavailable,
    ModelConnectionError,
    ModelRateLimited,
    ModelUnavailable,
)
from durable_ops.ai_worker.inference.metrics import export_local_circuit
from durable_ops.ai_worker.inference.request import InferenceRequest
from durable_ops.ai_worker.inference.result import InferenceResult
from durable_ops.clock import Clock, utc_now
from durable_ops.model.circuit import CircuitBreaker, CircuitState, Ticket
from durable_ops.model.routing import Route, external_route_permitted, route_plan
from durable_ops.model.states import Privacy
from durable_ops.settings import Settings

# How often a call waiting for the open circuit looks at it again.
CIRCUIT_POLL_SECONDS = 0.2
# How long a call no model took waits before asking again (the module docstring says why).
ASK_AGAIN_SECONDS = 1.0

_log = structlog.get_logger(__name__)


def _dropped(error: InferenceError) -> bool:
    """The model took the request and its connection broke before the answer's end (reset,
    closed, a stream cut short), as opposed to a refused connection or a timeout."""
    return isinstance(error, ModelConnectionError) and not error.took_nothing


def _pause(error: InferenceError, spacing: float, now: datetime) -> float:
    """How long to wait before asking again after ``error``: the spacing, or longer when a
    rate limit named its ``Retry-After`` (seconds, or a date measured from ``now``)."""
    asked = error.seconds_to_wait(now) if isinstance(error, ModelRateLimited) else None
    return spacing if asked is None else max(spacing, asked)


@dataclass
class _Asked:
    """How often one call asked a model again so far, and how long it waited before."""

    times: int = 0
    paused: float = 0.0


class Router:
    def __init__(
        self,
        local: ModelClient,
        breaker: CircuitBreaker,
        external: ModelClient | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        wall_clock: Clock = utc_now,
        ask_again_seconds: float = ASK_AGAIN_SECONDS,
    ) -> None:
        self.local = local
        self.external = external
        self.breaker = breaker
        self._clock = clock
        self._sleep = sleep  # with ``clock``: how a test drives the waits
        # A Retry-After given as a date is measured on it: ``clock`` is monotonic, no date.
        self._wall_clock = wall_clock
        self._ask_again_seconds = ask_again_seconds
        export_local_circuit(breaker, clock)

    @property
    def wall_clock(self) -> Clock:
        """The clock a ``Retry-After`` date is measured on, here and when the attempt it
        ended tells the operation when to come back (``failures.rate_limit_wait``)."""
        return self._wall_clock

    @classmethod
    def from_settings(cls, settings: Settings, *, timeout_seconds: float | None = None) -> Router:
        """Routes from ``OPS_AI_*``; the timeout defaults to the worker's task timeout."""
        timeout_seconds = timeout_seconds or settings.worker_task_timeout_seconds
        local = ModelClient(
            settings.ai_local_url,
            settings.ai_local_model,
            route=Route.LOCAL,
            timeout_seconds=timeout_seconds,
        )
        external = None
        if settings.ai_external_url:
            external = ModelClient(
                settings.ai_external_url,
                settings.ai_external_model,
                route=Route.EXTERNAL,
                api_key=settings.ai_external_api_key,
                timeout_seconds=timeout_seconds,
            )
        breaker = CircuitBreaker(settings.ai_circuit_failures, settings.ai_circuit_cooldown_seconds)
        return cls(local, breaker, external)

    async def aclose(self) -> None:
        await self.local.aclose()
        if self.external is not None:
            await self.external.aclose()

    def external_permitted(self, privacy: Privacy, task_external_allowed: bool) -> bool:
        return external_route_permitted(
            privacy,
            task_external_allowed=task_external_allowed,
            external_configured=self.external is not None,
        )

    async def infer(
        self,
        request: InferenceRequest,
        privacy: Privacy,
        task_external_allowed: bool,
        *,
        on_progress: ProgressCallback | None = None,
        on_text: TextCallback | None = None,
        on_usage: UsageCallback | None = None,
    ) -> InferenceResult:
        """Serve ``request`` on the local route; ``on_progress``, ``on_text`` and
        ``on_usage`` as in ``ModelClient.complete``. With no fallback permitted, a refused
        connection is asked again, a rate-limited one too once its ``Retry-After`` passed, a
        dropped one sent again once, and an open circuit waited for, in all at most
        ``circuit_wait_seconds`` besides the model calls (the module says why)."""
        may_fall_back = self.external_permitted(privacy, task_external_allowed)
        resent, asked = False, _Asked()
        while True:
            ticket = self.breaker.allow(self._clock())
            waited = ticket is None and not may_fall_back
            if waited:
                ticket = await self._wait_for_circuit(self.circuit_wait_seconds - asked.paused)
            plan = route_plan(
                privacy,
                task_external_allowed=task_external_allowed,
                external_configured=self.external is not None,
                local_circuit_allows=ticket is not None,
            )
            if ticket is None or not plan.try_local:
                raise LocalRouteUnavailable(
                    plan.on_local_unavailable,
                    reason="circuit_open",
                    provenance=self.local.provenance,
                )
            try:
                result = await self.local.complete(
                    request, on_progress=on_progress, on_text=on_text, on_usage=on_usage
                )
            except (ModelUnavailable, ModelRateLimited) as exc:
                if isinstance(exc, ModelRateLimited):
                    self._answered()  # the route is up, and busy: no outage (ADR 68)
                else:
                    self._failed(exc, ticket)
                # A connection the model dropped mid-request (killed, restarting): sent
                # again once, from scratch, as a refused one would be (the module says why).
                resend = _dropped(exc) and not resent
                resent = resent or resend
                # Once the circuit was waited for, its trial was the last ask.
                again = (exc.took_nothing or resend) and not may_fall_back and not waited
                if again and await self._ask_again(exc, asked):
                    continue
                raise LocalRouteUnavailable(
                    plan.on_local_unavailable, reason=exc.code, provenance=exc.provenance
                ) from exc
            except InferenceError:
                # The model answered (badly, or refused the request): the route is up.
                self._answered()
                raise
            self._answered()
            return result

    def _failed(self, error: ModelUnavailable, ticket: Ticket) -> None:
        """Count the failure of the call admitted with ``ticket``; say so once when it opens
        a closed circuit: the model just went down (which, where and why), not at each call
        while it stays down."""
        now = self._clock()
        was = self.breaker.state(now)
        self.breaker.record_failure(now, ticket)
        if was is CircuitState.CLOSED and self.breaker.state(now) is not CircuitState.CLOSED:
            _log.warning(
                "local_model_unavailable",
                url=self.local.url,
                model=self.local.model,
                code=error.code,
                why=error.message,  # our own wording, never a server's body
                failures_to_open=self.breaker.failure_threshold,
                cooldown_seconds=self.breaker.cooldown_seconds,
            )

    def _answered(self) -> None:
        """The model answered: the circuit closes, and an outage ends with a line."""
        now = self._clock()
        if self.breaker.state(now) is not CircuitState.CLOSED:
            _log.info("local_model_recovered", url=self.local.url, model=self.local.model)
        self.breaker.record_success(now)

    async def _ask_again(self, error: InferenceError, asked: _Asked) -> bool:
        """Wait to ask the model again after ``error``: the spacing, or a rate limit's
        ``Retry-After``. False at once, and the call ends, when it asked again as often as
        the breaker's threshold (on the local route its failures opened the circuit by then)
        or the wait would pass what is left of ``circuit_wait_seconds`` (ADR 68). Both
        routes ask again through here, so a 429 is waited out alike on either."""
        pause = _pause(error, self._ask_again_seconds, self._wall_clock())
        if asked.times >= self.breaker.failure_threshold:
            return False
        if asked.paused + pause > self.circuit_wait_seconds:
            return False
        asked.times += 1
        asked.paused += pause
        await self._sleep(pause)
        return True

    @property
    def circuit_wait_seconds(self) -> float:
        """The longest ``infer`` waits besides its own model calls: a spacing before each
        call asked again while the circuit is closed, then the open circuit's cooldown,
        and then the half-open trial of another call, which ends at the latest a model
        timeout after its last sign of progress (ADR 64). A rate limit's ``Retry-After``
        is waited out only within it, less what the call waited already, on either route
        (ADR 68)."""
        asking_again = self.breaker.failure_threshold * self._ask_again_seconds
        return asking_again + self.breaker.cooldown_seconds + self.local.timeout_seconds

    async def _wait_for_circuit(self, at_most: float) -> Ticket | None:
        """The ticket the local circuit admitted this call with (as the half-open trial, or
        once another call's trial closed it). None, the model still down, once the circuit
        is open again after its cooldown (a trial failed), or after ``at_most`` seconds
        (what is left of ``circuit_wait_seconds``)."""
        started = self._clock()
        _log.info("local_circuit_wait", wait_at_most_seconds=at_most)
        while True:
            await self._sleep(CIRCUIT_POLL_SECONDS)
            now = self._clock()
            ticket = self.breaker.allow(now)
            if ticket is not None:
                return ticket
            waited = now - started
            # The circuit opened before the wait began: open after a cooldown, it reopened.
            reopened = waited >= self.breaker.cooldown_seconds and (
                self.breaker.state(now) is CircuitState.OPEN
            )
            if reopened or waited >= at_most:
                return None

    async def infer_external(
        self,
        request: InferenceRequest,
        privacy: Privacy,
        task_external_allowed: bool,
        *,
        on_progress: ProgressCallback | None = None,
        on_text: TextCallback | None = None,
        on_usage: UsageCallback | None = None,
        privacy_now: Callable[[], Awaitable[Privacy]] | None = None,
    ) -> InferenceResult:
        """Serve an operation claimed from waiting_for_external_fallback.

        Privacy and the allowlist are checked again here, at the last moment
        before the user's text leaves the host: the owner may have switched to
        ``local_only`` since the fallback was decided. Refused here, the request is never
        sent, and nothing is spent on the external route.

        A 429 is waited out and asked again as ``infer`` does (ADR 68), within the same
        bound; it ends the call, ``ModelRateLimited``, only past that bound or the asks.
        Each ask again sends the text out anew, so the owner's privacy is read again first
        (``privacy_now``): one who chose local only during the wait is not sent outside.
        Any other failure ends it at once: the external route has no breaker to ride out
        an outage with, and the operation's retries take it from there.
        """
        external = self.external
        if external is None or not self.external_permitted(privacy, task_external_allowed):
            raise ExternalRouteNotPermitted("the external route is not permitted")
        asked = _Asked()
        while True:
            try:
                return await external.complete(
                    request, on_progress=on_progress, on_text=on_text, on_usage=on_usage
                )
            except ModelRateLimited as exc:
                if not await self._ask_again(exc, asked):
                    raise
            if privacy_now is not None:
                privacy = await privacy_now()
            if not self.external_permitted(privacy, task_external_allowed):
                raise ExternalRouteNotPermitted("the owner chose local only since it was asked")
