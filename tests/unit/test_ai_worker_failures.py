"""The AI worker's failure table: which errors retry, fail for good, or fall back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from durable_ops.ai_worker.failures import Action, classify, settlement
from durable_ops.ai_worker.inference.errors import (
    ExternalRouteNotPermitted,
    InvalidModelOutput,
    LocalRouteUnavailable,
    ModelConnectionError,
    ModelRateLimited,
    ModelRequestRejected,
    ModelServerError,
    ModelTimeout,
)
from durable_ops.ai_worker.journal import JournalError
from durable_ops.model.errors import (
    DomainError,
    InvalidArgument,
    LeaseLost,
    NotFound,
    PermissionDenied,
    Unavailable,
)
from durable_ops.model.provenance import Provenance
from durable_ops.model.routing import LocalUnavailableAction
from durable_ops.worker import (
    ExternalFallback,
    HandlerFailure,
    PermanentFailure,
    RetryableFailure,
)

LOCAL = Provenance(provider="127.0.0.1", model="dev-heuristic", route="local")


@pytest.mark.parametrize(
    ("error", "action", "code"),
    [
        (ModelTimeout("slow"), Action.RETRY, "model_timeout"),
        (ModelConnectionError("refused"), Action.RETRY, "model_connection_error"),
        (ModelServerError(503), Action.RETRY, "model_server_error"),
        (ModelRateLimited(2.0), Action.RETRY, "model_rate_limited"),
        (InvalidModelOutput("not JSON"), Action.RETRY, "invalid_model_output"),
        (ModelRequestRejected(400), Action.FAIL, "model_request_rejected"),
        (ModelRequestRejected(401), Action.FAIL, "model_request_rejected"),
        (ExternalRouteNotPermitted("privacy"), Action.RETRY, "external_route_not_permitted"),
        (TimeoutError(), Action.RETRY, "task_timeout"),
        (PermissionDenied("no", code="not_entitled"), Action.FAIL, "not_entitled"),
        (PermissionDenied("off", code="ai_disabled"), Action.FAIL, "ai_disabled"),
        (NotFound("job not found", code="job_not_found"), Action.FAIL, "subject_not_found"),
        (InvalidArgument("job", "is required"), Action.FAIL, "invalid_input"),
        (Unavailable("down"), Action.RETRY, "dependency_unavailable"),
        (DomainError("internal error"), Action.RETRY, "dependency_unavailable"),
        (JournalError("disk full"), Action.RETRY, "host_store_error"),
        (RuntimeError("bug"), Action.RETRY, "worker_error"),
        # An OSError is no attempt timeout, though TimeoutError is one.
        (ConnectionResetError("reset"), Action.RETRY, "worker_error"),
    ],
)
def test_failure_table(error: BaseException, action: Action, code: str) -> None:
    outcome = classify(error)
    assert (outcome.action, outcome.code) == (action, code)
    assert outcome.retryable is (action is not Action.FAIL)
    assert 0 < len(outcome.code) <= 64


def test_a_lost_lease_is_not_a_failure_to_report() -> None:
    # The executor never classifies LeaseLost; if it ever did, it must not fail for good.
    assert classify(LeaseLost("gone")).action is Action.RETRY


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        (LocalUnavailableAction.FALLBACK_TO_EXTERNAL, Action.FALLBACK),
        (LocalUnavailableAction.RETRY_LATER, Action.RETRY),
    ],
)
def test_local_route_down_falls_back_only_when_permitted(
    action: LocalUnavailableAction, expected: Action
) -> None:
    outcome = classify(LocalRouteUnavailable(action, reason="circuit_open", provenance=LOCAL))
    assert (outcome.action, outcome.code, outcome.provenance) == (expected, "circuit_open", LOCAL)


def test_provenance_of_the_model_is_kept_on_failure() -> None:
    outcome = classify(InvalidModelOutput("answer: missing summary", provenance=LOCAL))
    assert outcome.provenance == LOCAL
    assert classify(NotFound("gone")).with_provenance(LOCAL).provenance == LOCAL
    external = Provenance(provider="api.example", model="m", route="external")
    assert outcome.with_provenance(external).provenance == LOCAL  # the error's own wins


def test_messages_are_our_own_words() -> None:
    user_text = "Jane Doe, jane@example.com"
    outcome = classify(RuntimeError(user_text))
    assert user_text not in outcome.message


def test_the_sdk_settles_each_action_by_its_exception_type() -> None:
    down = LocalRouteUnavailable(
        LocalUnavailableAction.FALLBACK_TO_EXTERNAL, reason="circuit_open", provenance=LOCAL
    )
    fallback = settlement(down)
    assert isinstance(fallback, ExternalFallback)
    assert (fallback.reason, fallback.provenance) == ("circuit_open", LOCAL)
    retry = settlement(ModelTimeout("slow"))
    assert isinstance(retry, RetryableFailure)
    assert (retry.code, retry.retryable) == ("model_timeout", True)
    refused = settlement(ModelRequestRejected(400))
    assert isinstance(refused, PermanentFailure)
    assert (refused.code, refused.retryable) == ("model_request_rejected", False)
    own = PermanentFailure("invalid_input", "ours")
    assert settlement(own) is own  # a handler's own failure passes as it is


def test_a_long_message_is_cut_to_what_is_stored() -> None:
    outcome = classify(InvalidArgument("job", "x" * 2000))
    failure = settlement(InvalidArgument("job", "x" * 2000))
    assert len(outcome.message) > 512
    assert isinstance(failure, HandlerFailure)
    assert len(failure.message) == 512


# --- a rate limit that ended the attempt names when to come back (ADR 68) -----------------

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


def _ended_on(limited: ModelRateLimited, action: LocalUnavailableAction) -> Exception:
    """A 429 as the local route ends the call on it: the cause of a route unavailable."""
    try:
        raise LocalRouteUnavailable(action, reason=limited.code) from limited
    except LocalRouteUnavailable as raised:
        return raised


@pytest.mark.parametrize(
    "error",
    [
        ModelRateLimited(3600.0),  # the external route ends on the 429 itself
        ModelRateLimited(None, retry_at=NOW + timedelta(hours=1)),  # a date, from NOW
        _ended_on(ModelRateLimited(3600.0), LocalUnavailableAction.RETRY_LATER),
    ],
)
def test_a_rate_limit_retries_no_sooner_than_its_retry_after(error: Exception) -> None:
    failure = settlement(error, NOW)
    assert isinstance(failure, RetryableFailure)
    assert (failure.code, failure.retry_after) == ("model_rate_limited", timedelta(hours=1))


@pytest.mark.parametrize(
    ("asked", "carried"),
    [
        (None, None),  # it named no time: the operation's own retry delay
        (0.0, timedelta(seconds=1)),  # a date already passed: the least a failure may name
        (0.2, timedelta(seconds=1)),
        (3 * 86400.0, timedelta(days=1)),  # at most a day: a failure may name no more
    ],
)
def test_a_rate_limits_wait_is_held_to_what_a_failure_may_carry(
    asked: float | None, carried: timedelta | None
) -> None:
    failure = settlement(ModelRateLimited(asked), NOW)
    assert isinstance(failure, RetryableFailure)
    assert failure.retry_after == carried


def test_only_a_rate_limit_names_a_retry_after_and_only_given_the_clock() -> None:
    unmeasured = settlement(ModelRateLimited(3600.0))
    assert isinstance(unmeasured, RetryableFailure)
    assert unmeasured.retry_after is None
    for error in (ModelTimeout("slow"), ModelServerError(503), ModelConnectionError("refused")):
        failure = settlement(error, NOW)
        assert isinstance(failure, RetryableFailure)
        assert failure.retry_after is None
    fallback = _ended_on(ModelRateLimited(3600.0), LocalUnavailableAction.FALLBACK_TO_EXTERNAL)
    assert isinstance(settlement(fallback, NOW), ExternalFallback)  # no wait: it goes outside
