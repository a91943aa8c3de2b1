"""A create's fingerprint is stored with its operation (and its tombstone): it must not drift.

A repeated create is the same request exactly when the fingerprints match, so
a change to how it is computed would turn every repeat of an older request
into an ``idempotency_conflict``.
"""

from __future__ import annotations

from datetime import UTC, datetime

from durable_ops.model.states import Privacy
from durable_ops.storage.operations import CreateRequest

PLAIN = CreateRequest("a.b", "k", "s", "x")
FULL = CreateRequest(
    "a.b",
    "k2",
    "s",
    "y",
    priority=3,
    max_attempts=5,
    retry_delay_seconds=9,
    privacy=Privacy.EXTERNAL_ALLOWED,
    time_budget_seconds=7,
    context_ref="c",
    trace_parent="t",
)


def test_the_fingerprint_of_a_request_is_what_it_always_was() -> None:
    assert PLAIN.fingerprint() == "f7fca24ab772a3c4be98292d565ff72338e60c7a26cf680b2aab1674e8ab3520"
    assert FULL.fingerprint() == "5add5228e0dbade01fd7a0afdb4b5c1d765510a4b2a88332e49e78d51ceae757"


def test_the_key_deadline_and_trace_are_not_part_of_the_request() -> None:
    repeat = CreateRequest(
        "a.b",
        "another-key",
        "s",
        "x",
        deadline_at=datetime(2030, 1, 1, tzinfo=UTC),
        trace_parent="t",
    )
    assert repeat.fingerprint() == PLAIN.fingerprint()
    assert CreateRequest("a.b", "k", "s", "x", priority=1).fingerprint() != PLAIN.fingerprint()
