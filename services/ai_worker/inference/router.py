"""Local-first routing of inferences over the configured model routes (AI-002).

A local-route worker calls ``infer``: the local model, guarded by the circuit
breaker. When the local route is down or its circuit open, ``infer`` raises
``LocalRouteUnavailable`` saying whether the operation may fall back to the
external route; it never calls the external model itself, because the
fallback is a state of the operation that a worker holding the external
route claims and serves with ``infer_external``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

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
    ModelUnavailable,
)
from durable_ops.ai_worker.inference.metrics import export_local_circuit
from durable_ops.ai_worker.inference.request import InferenceRequest
from durable_ops.ai_worker.inference.result import InferenceResult
from durable_ops.model.circuit import CircuitBreaker
from durable_ops.model.routing import Route, external_route_permitted, route_plan
from durable_ops.model.states import Privacy
from durable_ops.settings import Settings


class Router:
    def __init__(
        self,
        local: ModelClient,
        breaker: CircuitBreaker,
        external: ModelClient | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.local = local
        self.external = external
        self.breaker = breaker
        self._clock = clock
        export_local_circuit(breaker, clock)

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
        ``on_usage`` as in ``ModelClient.complete``."""
        plan = route_plan(
            privacy,
            task_external_allowed=task_external_allowed,
            external_configured=self.external is not None,
            local_circuit_allows=self.breaker.allow(self._clock()),
        )
        if not plan.try_local:
            raise LocalRouteUnavailable(
                plan.on_local_unavailable,
                reason="circuit_open",
                provenance=self.local.provenance,
            )
        try:
            result = await self.local.complete(
                request, on_progress=on_progress, on_text=on_text, on_usage=on_usage
            )
        except ModelUnavailable as exc:
            self.breaker.record_failure(self._clock())
            raise LocalRouteUnavailable(
                plan.on_local_unavailable, reason=exc.code, provenance=exc.provenance
            ) from exc
        except InferenceError:
            # The model answered (badly, or refused the request): the route is up.
            self.breaker.record_success(self._clock())
            raise
        self.breaker.record_success(self._clock())
        return result

    async def infer_external(
        self,
        request: InferenceRequest,
        privacy: Privacy,
        task_external_allowed: bool,
        *,
        on_progress: ProgressCallback | None = None,
        on_text: TextCallback | None = None,
        on_usage: UsageCallback | None = None,
    ) -> InferenceResult:
        """Serve an operation claimed from waiting_for_external_fallback.

        Privacy and the allowlist are checked again here, at the last moment
        before the user's text leaves the host: the owner may have switched to
        ``local_only`` since the fallback was decided. Refused here, the request is never
        sent, and nothing is spent on the external route.
        """
        if self.external is None or not self.external_permitted(privacy, task_external_allowed):
            raise ExternalRouteNotPermitted("the external route is not permitted")
        return await self.external.complete(
            request, on_progress=on_progress, on_text=on_text, on_usage=on_usage
        )
