"""The worker SDK's pure pieces: how a handler's end is settled."""

from __future__ import annotations

from durable_ops.model.provenance import Provenance
from durable_ops.worker import Completed, ExternalFallback, RetryableFailure, WorkerShutdown
from durable_ops.worker.failures import HANDLER_ERROR, completed, failure_of

LOCAL = Provenance(provider="127.0.0.1", model="dev-heuristic", route="local")


def test_shutdown_gives_the_operation_back() -> None:
    outcome = WorkerShutdown()
    assert (outcome.code, outcome.retryable) == ("worker_shutdown", True)
    assert failure_of(outcome) is outcome


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
