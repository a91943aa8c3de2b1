"""Why an inference failed, and whether trying again can help.

Retryability is a property of the error (as in Temporal), so a worker needs no
table of its own::

    InferenceError                    retryable
    ├── ModelUnavailable              yes  the route is down; the local breaker counts it
    │   ├── ModelTimeout              yes  no sign of progress within the timeout
    │   ├── ModelConnectionError      yes  reset, broken stream, protocol error
    │   │   └── ModelUnreachable      yes  refused, no route, DNS, not made in time:
    │   │                                  nothing was sent
    │   └── ModelServerError          yes  HTTP 5xx, and 408 (the server gave up waiting
    │                                      for our request); 408 and 503 took nothing
    ├── ModelRateLimited              yes  HTTP 429: the route is up and asks us to wait
    │                                      (carries retry_after_seconds, or retry_at for
    │                                      a date); took nothing, and the breaker does
    │                                      not count it (ADR 68)
    ├── InvalidModelOutput            yes  answered, but not JSON or not the schema
    ├── ModelRequestRejected          no   any other HTTP status >= 300 (key, model,
    │                                      request; 425 too: we never send early data)
    ├── LocalRouteUnavailable         yes  the local route is down or its circuit open;
    │                                      ``fallback_permitted`` says whether the operation
    │                                      may move to waiting_for_external_fallback
    └── ExternalRouteNotPermitted     yes  privacy, allowlist or configuration forbids the
                                           external route; a later local attempt may run

Each error has a stable ``code`` (fits the operation's failure code) and a short
message of our own wording: never a model answer or a server's error body,
which may echo the user's text. ``provenance`` names the provider, model and
route that were tried, when there was one.
"""

from __future__ import annotations

from datetime import datetime

from durable_ops.model.provenance import Provenance
from durable_ops.model.routing import LocalUnavailableAction


class InferenceError(Exception):
    code = "inference_error"
    retryable = True
    # Nothing reached a model: asking again spends nothing (``Router.infer``).
    took_nothing = False

    def __init__(self, message: str, *, provenance: Provenance | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.provenance = provenance


class ModelUnavailable(InferenceError):
    code = "model_unavailable"


class ModelTimeout(ModelUnavailable):
    code = "model_timeout"


class ModelConnectionError(ModelUnavailable):
    code = "model_connection_error"


class ModelUnreachable(ModelConnectionError):
    """No connection was made (refused, no route to it, not made within its bound)."""

    took_nothing = True


# Statuses that say the request never arrived whole (408 Request Timeout): a server error
# that took nothing, not a refusal of the request. 425 Too Early is not one: a server may
# send it only to a request in TLS early data (RFC 8470), which httpx never sends, so one
# that does is broken and its refusal stands.
NOT_RECEIVED = frozenset({408})


class ModelServerError(ModelUnavailable):
    """HTTP 5xx, or 408 Request Timeout: the server (or a proxy before it) gave up waiting
    for our request to arrive, so it read no prompt; a server too stuck to read a request
    is down to us, as a 5xx is."""

    code = "model_server_error"

    def __init__(self, status_code: int, *, provenance: Provenance | None = None) -> None:
        super().__init__(f"model answered HTTP {status_code}", provenance=provenance)
        self.status_code = status_code
        # 503: llama-server while it loads its model, or with no slot free.
        self.took_nothing = status_code == 503 or status_code in NOT_RECEIVED


class ModelRateLimited(InferenceError):
    """HTTP 429: the route answered, asking us to wait ``retry_after_seconds``, or until
    ``retry_at`` when its ``Retry-After`` was an HTTP date (both None when it named
    neither). Nothing was taken; it is no outage, so the breaker does not count it
    (ADR 68)."""

    code = "model_rate_limited"
    took_nothing = True

    def __init__(
        self,
        retry_after_seconds: float | None,
        *,
        retry_at: datetime | None = None,
        provenance: Provenance | None = None,
    ) -> None:
        super().__init__("model answered HTTP 429", provenance=provenance)
        self.status_code = 429
        self.retry_after_seconds = retry_after_seconds
        self.retry_at = retry_at

    def seconds_to_wait(self, now: datetime) -> float | None:
        """How long, from ``now``, the server asked us to wait: 0 once its date passed;
        None when it did not say."""
        if self.retry_at is not None:
            return max(0.0, (self.retry_at - now).total_seconds())
        return self.retry_after_seconds


class InvalidModelOutput(InferenceError):
    code = "invalid_model_output"


class ModelRequestRejected(InferenceError):
    code = "model_request_rejected"
    retryable = False

    def __init__(self, status_code: int, *, provenance: Provenance | None = None) -> None:
        super().__init__(
            f"model refused the request with HTTP {status_code}", provenance=provenance
        )
        self.status_code = status_code


class LocalRouteUnavailable(InferenceError):
    code = "local_route_unavailable"

    def __init__(
        self,
        action: LocalUnavailableAction,
        *,
        reason: str,
        provenance: Provenance | None = None,
    ) -> None:
        super().__init__(f"local model route unavailable ({reason})", provenance=provenance)
        self.action = action
        self.reason = reason  # "circuit_open" or the code of the local failure

    @property
    def fallback_permitted(self) -> bool:
        return self.action is LocalUnavailableAction.FALLBACK_TO_EXTERNAL


class ExternalRouteNotPermitted(InferenceError):
    code = "external_route_not_permitted"
