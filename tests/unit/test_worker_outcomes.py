"""The worker SDK's pure pieces: how a handler's end is settled."""

from __future__ import annotations

from durable_ops.model.provenance import Provenance
from durable_ops.worker import (
    Completed,
    Ending,
    ExternalFallback,
    HandlerFailure,
    RetryableFailure,
    WorkerShutdown,
)
from durable_ops.worker.completer import settlement_item
from durable_ops.worker.failures import HANDLER_ERROR, completed, failure_of
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
