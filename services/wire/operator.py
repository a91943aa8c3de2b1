"""Rows ⇄ protobuf messages of the Operator API: the operator's view of an operation, its
filters and prune policy, task types' pauses and console sessions."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from durable_ops.api.operator.v1 import operator_pb2 as opb
from durable_ops.model.errors import InvalidArgument
from durable_ops.model.operator import OperatorFilter
from durable_ops.model.retention import RetentionPolicy
from durable_ops.model.states import OperationState
from durable_ops.model.usage import Usage
from durable_ops.storage.console import Signed
from durable_ops.storage.operator import QueueDepth
from durable_ops.storage.schema import OperationAttempt, UserOperation
from durable_ops.storage.task_pauses import Pause
from durable_ops.wire import operations as convert


def operator_attempt(row: OperationAttempt) -> opb.OperatorAttempt:
    """One attempt as its history recorded it (never its lease token, nor the hash)."""
    message = opb.OperatorAttempt(
        attempt=row.attempt,
        route=row.route,
        outcome=row.outcome or "",
        failure_code=row.failure_code or "",
        failure_message=row.failure_message or "",
        provider=row.provider or "",
        model=row.model or "",
    )
    message.started_at.CopyFrom(convert.timestamp(row.started_at))
    message.lease_expires_at.CopyFrom(convert.timestamp(row.lease_expires_at))
    if row.ended_at is not None:
        message.ended_at.CopyFrom(convert.timestamp(row.ended_at))
    if row.prompt_tokens is not None:  # the three are written together
        used = Usage(row.prompt_tokens, row.completion_tokens or 0, row.model_ms or 0)
        message.usage.CopyFrom(convert.usage_to_pb(used))
    return message


def operator_operation(
    row: UserOperation, attempts: Sequence[OperationAttempt] = ()
) -> opb.OperatorOperation:
    """The owner's view, plus what only an operator sees (never the lease token's hash).

    Less the result reference: where an owner's result is stays the owner's (ADR 0019)."""
    owners = convert.operation(row)
    owners.ClearField("result_ref")
    message = opb.OperatorOperation(
        operation=owners,
        owner_id=row.owner_user_id,
        priority=row.priority,
        privacy=convert.privacy_to_pb(row.privacy),
        failure_code=row.failure_code or "",
        failure_message=row.failure_message or "",
        attempts=[operator_attempt(attempt) for attempt in attempts],
    )
    if row.lease_expires_at is not None:
        message.lease_expires_at.CopyFrom(convert.timestamp(row.lease_expires_at))
        # Heartbeats extend the operation's lease, not its attempt's row (schema): the
        # attempt running now shows the lease it runs on, not its claim's first expiry.
        for running in message.attempts:
            if not running.HasField("ended_at"):
                running.lease_expires_at.CopyFrom(message.lease_expires_at)
    return message


def queue_depth(depth: QueueDepth) -> opb.QueueDepth:
    """One task type's unfinished operations by state, its oldest queued one, and its
    running ones past their lease."""
    counts = depth.counts
    message = opb.QueueDepth(
        task_type=depth.task_type,
        queued=counts.get(OperationState.QUEUED, 0),
        running=counts.get(OperationState.RUNNING, 0),
        waiting_for_retry=counts.get(OperationState.WAITING_FOR_RETRY, 0),
        waiting_for_external_fallback=counts.get(OperationState.WAITING_FOR_EXTERNAL_FALLBACK, 0),
    )
    if depth.oldest_queued_at is not None:
        message.oldest_queued_at.CopyFrom(convert.timestamp(depth.oldest_queued_at))
    message.running_past_lease = depth.running_past_lease
    if depth.lease_overdue_since is not None:
        message.lease_overdue_since.CopyFrom(convert.timestamp(depth.lease_overdue_since))
    return message


def retention_policy(request: opb.PruneOperationsRequest, tombstones: timedelta) -> RetentionPolicy:
    """A prune's policy; ``tombstones`` is the tombstone horizon when the request names none."""
    if not request.HasField("older_than"):
        raise InvalidArgument("older_than", "is required: how long after it finished")
    older_than = convert.duration(request, "older_than")
    assert older_than is not None
    asked = convert.duration(request, "tombstones_older_than")
    return RetentionPolicy(older_than, tombstones if asked is None else asked).validated()


def prune_response(
    pruned: int, forgotten: int, more: bool, policy: RetentionPolicy, now: datetime
) -> opb.PruneOperationsResponse:
    """What a prune did (or, dry, would do), and the horizons it measured from ``now``."""
    answer = opb.PruneOperationsResponse(pruned=pruned, forgotten=forgotten, more=more)
    answer.finished_before.FromDatetime(policy.operations_finished_before(now))
    answer.tombstones_finished_before.FromDatetime(policy.tombstones_finished_before(now))
    return answer


def operator_filter(request: opb.ListOperationsRequest) -> OperatorFilter:
    return OperatorFilter(
        owner_id=request.owner_id,
        state=convert.state_from_pb(request.state),
        task_type=request.task_type,
        older_than=convert.duration(request, "older_than"),
        failure_code=request.failure_code,
    ).validated()


def console_session(signed: Signed, session_id: str = "") -> opb.ConsoleSession:
    answer = opb.ConsoleSession(session_id=session_id, operator=signed.operator)
    answer.expires_at.FromDatetime(signed.expires_at)
    return answer


def task_type_status(task_type: str, pause: Pause | None) -> opb.TaskTypeStatus:
    status = opb.TaskTypeStatus(task_type=task_type, paused=pause is not None)
    if pause is not None:
        status.paused_by = pause.paused_by
        status.paused_at.CopyFrom(convert.timestamp(pause.paused_at))
    return status
