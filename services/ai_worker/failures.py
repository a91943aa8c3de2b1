"""How an attempt that did not succeed is reported: a pure decision per error.

    error                                           action     failure code
    LocalRouteUnavailable, fallback permitted       fallback   (none: a state, not a failure)
    LocalRouteUnavailable, no fallback              retry      its reason (circuit_open, model_…)
    other InferenceError (timeout, connection,      retry      the error's code
      5xx, 408, 429, invalid output, not permitted)
    ModelRequestRejected (any other 4xx)            fail       model_request_rejected
    TimeoutError (the attempt's own timeout)        retry      task_timeout
    PermissionDenied (entitlement revoked)          fail       its code (not_entitled, ai_disabled)
    NotFound (the subject or context was deleted)   fail       subject_not_found
    InvalidArgument (input the task cannot use)     fail       invalid_input
    other DomainError (a service unavailable)       retry      dependency_unavailable
    JournalError (the host journal failed)          retry      host_store_error
    anything else                                   retry      worker_error

A rate limit (429, ``ModelRateLimited``) that ended the attempt, on the external route
or as the cause of ``LocalRouteUnavailable`` with no fallback, retries no sooner than its
``Retry-After`` (``retry_after``, measured from the router's wall clock and held to what a
failure may name, 1 s to a day: ``rate_limit_wait``), rather than after the operation's
own retry delay alone: the provider said when to come back (ADR 68).

Retries are bounded by the operation's attempts, so an unexpected error is
retried rather than failed for good. Messages are our own wording, never a
model answer or user text. ``settlement`` hands the worker SDK the outcome
as the exception type it settles by (a handler's own ``HandlerFailure`` or
``ExternalFallback`` passes as it is). A lost lease and the owner's cancel are
not failures: the SDK settles those itself, as it does a call of its own API out
of its bounds (``InvalidHandlerCall``, an ``InvalidArgument`` that never reaches
``settlement``: failed as ``invalid_handler_call``, not ``invalid_input``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum

from durable_ops.ai_worker.inference.errors import (
    InferenceError,
    LocalRouteUnavailable,
    ModelRateLimited,
)
from durable_ops.ai_worker.journal import JournalError
from durable_ops.model.bounds import FAILURE_MESSAGE_MAX, RETRY_AFTER_RANGE
from durable_ops.model.errors import DomainError, InvalidArgument, NotFound, PermissionDenied
from durable_ops.model.provenance import Provenance
from durable_ops.worker.failures import (
    ExternalFallback,
    HandlerFailure,
    PermanentFailure,
    RetryableFailure,
    Settlement,
)


class Action(StrEnum):
    RETRY = "retry"  # fail retryable: waiting_for_retry while attempts remain
    FAIL = "fail"  # fail permanent
    FALLBACK = "fallback"  # request the external fallback


@dataclass(frozen=True)
class Outcome:
    action: Action
    code: str
    message: str
    provenance: Provenance | None = None
    retry_after: timedelta | None = None  # a retry's earliest start, from the failure

    @property
    def retryable(self) -> bool:
        return self.action is not Action.FAIL

    def with_provenance(self, provenance: Provenance) -> Outcome:
        """Name the model that answered when the error itself names none."""
        return replace(self, provenance=self.provenance or provenance)

    def as_settlement(self) -> Settlement:
        """The SDK's exception for this outcome, which it settles the operation by."""
        if self.action is Action.FALLBACK:
            return ExternalFallback(self.code, provenance=self.provenance)
        message = self.message[:FAILURE_MESSAGE_MAX]
        if not self.retryable:
            return PermanentFailure(self.code, message, provenance=self.provenance)
        return RetryableFailure(
            self.code, message, provenance=self.provenance, retry_after=self.retry_after
        )


def classify(error: BaseException) -> Outcome:
    if isinstance(error, LocalRouteUnavailable):
        action = Action.FALLBACK if error.fallback_permitted else Action.RETRY
        return Outcome(action, error.reason, error.message, error.provenance)
    if isinstance(error, InferenceError):
        action = Action.RETRY if error.retryable else Action.FAIL
        return Outcome(action, error.code, error.message, error.provenance)
    if isinstance(error, TimeoutError):
        return Outcome(Action.RETRY, "task_timeout", "the attempt ran out of time")
    if isinstance(error, PermissionDenied):
        return Outcome(Action.FAIL, error.code, error.message)
    if isinstance(error, NotFound):
        return Outcome(Action.FAIL, "subject_not_found", "an input of the task no longer exists")
    if isinstance(error, InvalidArgument):
        return Outcome(Action.FAIL, "invalid_input", error.message)
    if isinstance(error, DomainError):
        return Outcome(
            Action.RETRY, "dependency_unavailable", f"a service call failed: {error.code}"
        )
    if isinstance(error, JournalError):
        return Outcome(Action.RETRY, "host_store_error", "the host journal failed")
    return Outcome(Action.RETRY, "worker_error", f"unexpected {type(error).__name__}")


def rate_limit_wait(error: BaseException, now: datetime) -> timedelta | None:
    """How long from ``now`` the rate limit that ended the attempt asked us to wait, held to
    ``RETRY_AFTER_RANGE`` (a date passed is the least, a wait past a day the most, which a
    deadline ends anyway); None when the attempt ended on no rate limit, or it named no time.
    The local route ends on one as the cause of ``LocalRouteUnavailable``."""
    limited = error.__cause__ if isinstance(error, LocalRouteUnavailable) else error
    if not isinstance(limited, ModelRateLimited):
        return None
    seconds = limited.seconds_to_wait(now)
    if seconds is None:
        return None
    least, most = RETRY_AFTER_RANGE
    return min(max(timedelta(seconds=seconds), least), most)


def settlement(error: Exception, now: datetime | None = None) -> Settlement:
    """How the worker SDK settles an attempt that raised ``error`` (``Worker(classify=...)``).

    Given ``now`` (the router's wall clock), a rate limit's retry waits for its
    ``Retry-After`` (``rate_limit_wait``); the SDK's own call gives none, and it only meets
    errors other than the model's."""
    if isinstance(error, HandlerFailure | ExternalFallback):
        return error
    outcome = classify(error)
    if now is not None:
        outcome = replace(outcome, retry_after=rate_limit_wait(error, now))
    return outcome.as_settlement()
