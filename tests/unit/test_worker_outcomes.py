"""The worker SDK's pure pieces: how a handler's end is settled."""

from __future__ import annotations

from datetime import timedelta

import pytest

from durable_ops.model.errors import InvalidArgument
from durable_ops.model.provenance import Provenance
from durable_ops.worker import (
    Attempt,
    Completed,
    Ending,
    ExternalFallback,
    HandlerFailure,
    InvalidHandlerCall,
    PermanentFailure,
    RetryableFailure,
    Usage,
    WorkerShutdown,
)
from durable_ops.worker.completer import settlement_item
from durable_ops.worker.failures import (
    HANDLER_ERROR,
    INVALID_HANDLER_CALL,
    completed,
    failure_of,
)
from durable_ops.worker.lease import LeaseStream
from tests.support.claimed import a_claim

LOCAL = Provenance(provider="127.0.0.1", model="dev-heuristic", route="local")
ATTEMPT = a_claim(lease_token="token-1")


def test_shutdown_is_a_release_not_a_failure() -> None:
    assert not isinstance(WorkerShutdown(), HandlerFailure)
    item, ending = settlement_item(ATTEMPT, WorkerShutdown())
    assert (item.WhichOneof("outcome"), ending) == ("release", Ending.RELEASED)
    assert (item.owner_id, item.release.operation_id, item.release.lease_token) == (
        "alice",
        "op-1",
        "token-1",
    )


def test_a_fallback_passes_as_it_is_and_anything_else_is_a_retryable_handler_error() -> None:
    fallback = ExternalFallback("circuit_open", provenance=LOCAL)
    assert failure_of(fallback) is fallback
    other = failure_of(RuntimeError("Jane Doe, jane@example.com"))
    assert isinstance(other, RetryableFailure)
    assert (other.code, other.message) == (HANDLER_ERROR, "RuntimeError")


def test_a_return_becomes_a_completion() -> None:
    assert completed(None) == Completed("")
    assert completed("reports/1.pdf") == Completed("reports/1.pdf")
    with_model = Completed("note-1", LOCAL)
    assert completed(with_model) is with_model


def test_a_failure_out_of_its_bounds_is_the_sdks_invalid_handler_call() -> None:
    with pytest.raises(InvalidHandlerCall) as raised:
        PermanentFailure("Bad Code!")
    # Still an InvalidArgument, as before, for a handler that catches that.
    assert isinstance(raised.value, InvalidArgument)
    failure = raised.value.failure()
    assert (failure.retryable, failure.code, failure.message) == (
        False,
        INVALID_HANDLER_CALL,
        "failure_code: may contain only a-z, 0-9, '.', '_' and '-'",
    )
    with pytest.raises(InvalidHandlerCall, match="failure_message: must be at most 512"):
        RetryableFailure("model_busy", "m" * 513)


def test_usage_beyond_what_a_settlement_carries_is_an_invalid_handler_call() -> None:
    def no_stream() -> object:
        raise AssertionError("used() needs no lease stream")

    attempt = Attempt(a_claim(), LeaseStream(no_stream), lease_seconds=30)  # type: ignore[arg-type]
    with pytest.raises(InvalidHandlerCall, match=r"usage\.prompt_tokens: must be between 0"):
        attempt.used(Usage(prompt_tokens=-1), LOCAL)
    attempt.used(Usage(prompt_tokens=3), LOCAL)
    assert attempt.usage == Usage(prompt_tokens=3)


def test_a_retryable_failure_carries_its_retry_after_to_the_settlement() -> None:
    told = RetryableFailure("model_rate_limited", retry_after=timedelta(hours=1))
    item, ending = settlement_item(ATTEMPT, told)
    assert (item.WhichOneof("outcome"), ending) == ("fail", Ending.FAILED)
    assert item.fail.HasField("retry_after")
    assert item.fail.retry_after.ToTimedelta() == timedelta(hours=1)
    assert (item.fail.operation_id, item.fail.lease_token) == ("op-1", "token-1")


def test_a_failure_without_a_retry_after_sends_none() -> None:
    for failure in (RetryableFailure("model_busy"), PermanentFailure("unsupported_subject")):
        item, _ = settlement_item(ATTEMPT, failure)
        assert not item.fail.HasField("retry_after")
        assert failure.retry_after is None


@pytest.mark.parametrize("wait", [timedelta(0), timedelta(days=1, seconds=1)])
def test_a_retry_after_out_of_its_bounds_is_an_invalid_handler_call(wait: timedelta) -> None:
    with pytest.raises(InvalidHandlerCall) as raised:
        RetryableFailure("model_rate_limited", retry_after=wait)
    assert raised.value.field == "retry_after"
