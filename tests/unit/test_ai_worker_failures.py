"""The AI worker's failure table: which errors retry, fail for good, or fall back."""

from __future__ import annotations

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
