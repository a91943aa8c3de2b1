"""The answer so far (issue 39, point 1) through the real servers, on both engines.

A lease stream's beat may carry the attempt's answer text: the one beat
writer keeps it as the attempt's draft (``ai_answer_drafts``, never the
operation row) in the beat's transaction, under the lease guard. The owner
reads it (``GetAnswerDraft``); nobody else does; a new attempt starts afresh;
the end of the operation deletes it.
"""

from __future__ import annotations

import grpc
from sqlalchemy import select
from structlog.testing import capture_logs

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.model.drafts import ANSWER_DRAFT_MAX_BYTES, DRAFT_TOO_LARGE
from durable_ops.operations import pruner
from durable_ops.storage.drafts import DRAFT_NOT_FOUND, STALE_AFTER
from durable_ops.storage.schema import AnswerDraft, UserOperation
from tests.support.clock import ManualClock
from tests.support.grpc_services import Services
from tests.support.operations_client import (
    ALICE,
    BOB,
    SUCCEEDED,
    WAITING_FOR_RETRY,
    Lease,
    LeaseStream,
    OpsClient,
    expect_failure,
)
from tests.support.stored import rows

OK = 0
ABORTED = grpc.StatusCode.ABORTED.value[0]
INVALID = grpc.StatusCode.INVALID_ARGUMENT.value[0]
RETRY_DELAY = 2


def _text_beat(
    stream: LeaseStream, lease: Lease, text: str, *, add: bool = False
) -> pb.HoldLeasesResponse.Outcome:
    entry = pb.HeldLease(operation_id=lease.id, answer_text=text)
    if add:
        entry.owner_id, entry.lease_token, entry.lease_seconds = lease.owner, lease.token, 30
    stream.send(pb.HoldLeasesRequest(leases=[entry]))
    while (answer := stream.read()).pushed:
        pass
    (outcome,) = answer.outcomes
    return outcome


def _draft(ops: OpsClient, owner: str, operation_id: str) -> pb.AnswerDraft:
    answer: pb.AnswerDraft = ops.stub.GetAnswerDraft(
        pb.GetAnswerDraftRequest(operation_id=operation_id), metadata=ops.gateway(owner)
    )
    return answer


def _stored(services: Services) -> list[tuple[str, int, str]]:
    found = rows(
        services.db, select(AnswerDraft.operation_id, AnswerDraft.attempt, AnswerDraft.body)
    )
    return [tuple(row) for row in found]


def test_a_beat_with_text_keeps_the_attempts_draft_for_its_owner_alone(
    services: Services, ops: OpsClient
) -> None:
    created = ops.create(ALICE, "drafted")
    lease = ops.claim_one()
    stream = ops.lease_stream()
    with capture_logs() as logged:
        assert _text_beat(stream, lease, '{"summary": "Stro', add=True).status_code == OK
        assert _text_beat(stream, lease, '{"summary": "Strong fit"').status_code == OK
    assert logged, "the servers log the stream"
    assert "Stro" not in repr(logged)  # the owner's content is never logged

    draft = _draft(ops, ALICE, created.id)
    assert (draft.attempt, draft.text) == (1, '{"summary": "Strong fit"')
    assert _stored(services) == [(created.id, 1, '{"summary": "Strong fit"')]
    # Not in the operation row, nor in what the owner sees of the operation.
    operation_row = rows(services.db, select(UserOperation).where(UserOperation.id == created.id))
    assert "Strong fit" not in repr(tuple(operation_row[0]))
    assert "Strong fit" not in str(ops.get(ALICE, created.id))
    # Another owner's read looks exactly like a missing draft.
    expect_failure(lambda: _draft(ops, BOB, created.id), grpc.StatusCode.NOT_FOUND, DRAFT_NOT_FOUND)
    stream.close()


def test_a_new_attempt_starts_afresh_and_the_older_attempts_text_is_refused(
    services: Services, ops: OpsClient, clock: ManualClock
) -> None:
    created = ops.create(ALICE, "retried", max_attempts=3, retry_delay_seconds=RETRY_DELAY)
    first = ops.claim_one()
    stream = ops.lease_stream()
    assert _text_beat(stream, first, "attempt one says", add=True).status_code == OK
    assert ops.fail(first, retryable=True, code="model_busy") == WAITING_FOR_RETRY
    # Waiting for its retry, the operation shows no draft: the text was another attempt's.
    expect_failure(lambda: _draft(ops, ALICE, created.id), grpc.StatusCode.NOT_FOUND)
    clock.advance(4 * RETRY_DELAY + 1)
    assert services.sweep().promoted == 1
    second = ops.claim_one()
    assert second.id == created.id

    late = ops.lease_stream()  # the first attempt's holder, still beating with its old token
    assert _text_beat(late, first, "attempt one goes on", add=True).status_code == ABORTED
    assert _text_beat(stream, second, "two", add=True).status_code == OK
    draft = _draft(ops, ALICE, created.id)
    assert (draft.attempt, draft.text) == (2, "two")
    assert _stored(services) == [(created.id, 2, "two")]
    stream.close()
    late.close()


def test_the_end_of_the_operation_deletes_its_draft(services: Services, ops: OpsClient) -> None:
    created = ops.create(ALICE, "ended")
    lease = ops.claim_one()
    stream = ops.lease_stream()
    assert _text_beat(stream, lease, '{"summary": "done"}', add=True).status_code == OK
    assert ops.complete(lease) == SUCCEEDED
    assert _stored(services) == []
    expect_failure(lambda: _draft(ops, ALICE, created.id), grpc.StatusCode.NOT_FOUND)
    stream.close()


def test_a_text_beyond_the_answer_budget_is_refused_for_that_lease_alone(
    services: Services, ops: OpsClient
) -> None:
    ops.create(ALICE, "too-long")
    lease = ops.claim_one()
    stream = ops.lease_stream()
    outcome = _text_beat(stream, lease, "é" * (ANSWER_DRAFT_MAX_BYTES // 2 + 1), add=True)
    assert (outcome.status_code, outcome.error_code) == (INVALID, DRAFT_TOO_LARGE)
    assert _stored(services) == []
    stream.close()


def test_the_prune_deletes_a_draft_no_beat_wrote_for_a_day_and_keeps_the_rest(
    services: Services, ops: OpsClient, clock: ManualClock
) -> None:
    """A draft whose retry never came stays after its attempt (no end deletes it): the
    hourly prune, retention off, deletes it a day after its last beat; a live one stays."""
    stale = ops.create(ALICE, "never-retried", max_attempts=3, retry_delay_seconds=RETRY_DELAY)
    lease = ops.claim_one()
    stream = ops.lease_stream()
    assert _text_beat(stream, lease, "left behind", add=True).status_code == OK
    assert ops.fail(lease, retryable=True, code="model_busy") == WAITING_FOR_RETRY
    stream.close()
    clock.advance(STALE_AFTER.total_seconds())
    live = ops.create(BOB, "beating")
    lease = ops.claim_one()
    stream = ops.lease_stream()
    assert _text_beat(stream, lease, "so far", add=True).status_code == OK

    def prune() -> None:
        services.loop.call(pruner.prune(services.db, clock, None, batch_size=100))

    prune()  # a day to the instant since its last beat: kept
    assert set(_stored(services)) == {(stale.id, 1, "left behind"), (live.id, 1, "so far")}
    clock.advance(0.001)
    prune()
    assert _stored(services) == [(live.id, 1, "so far")]
    stream.close()
