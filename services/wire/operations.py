"""Rows and domain values ⇄ protobuf messages of the Operations API."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from google.longrunning import operations_proto_pb2 as lro
from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.model import bounds
from durable_ops.model.errors import DomainError, InvalidArgument, UsageCharged
from durable_ops.model.lifecycle import Event
from durable_ops.model.routing import Route
from durable_ops.model.states import OperationState, Privacy
from durable_ops.model.usage import Usage
from durable_ops.rpc import states
from durable_ops.rpc.errors import status_for
from durable_ops.storage.drafts import Draft
from durable_ops.storage.operations import Claim, CreateRequest, Provenance, Settlement
from durable_ops.storage.schema import UserOperation

STATUS_URL = "/api/operations/{id}"


def status_url(operation_id: str) -> str:
    return STATUS_URL.format(id=operation_id)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def timestamp(value: datetime) -> Timestamp:
    """``Timestamp.FromDatetime``, without its pure-Python calendar arithmetic (a third
    of the cost; every operation sent carries two to six of these)."""
    if value.tzinfo is None:  # local time, as astimezone reads it
        value = value.astimezone(UTC)
    since = value - _EPOCH
    return Timestamp(seconds=since.days * 86_400 + since.seconds, nanos=since.microseconds * 1000)


def from_timestamp(stamp: Timestamp) -> datetime:
    return stamp.ToDatetime(tzinfo=UTC)


# Rows hold the domain values as strings, so the ``..._to_pb`` side takes those too.
def state_to_pb(state: OperationState | str) -> pb.OperationState.ValueType:
    return states.state_to_pb(OperationState(state))


def state_from_pb(value: pb.OperationState.ValueType) -> OperationState | None:
    """``None`` for unspecified (a request's "no filter"); unknown numbers are refused."""
    if value == pb.OPERATION_STATE_UNSPECIFIED:
        return None
    try:
        return states.state_from_pb(value)
    except ValueError:
        raise InvalidArgument("state", "is not a known operation state") from None


def privacy_to_pb(privacy: Privacy | str) -> pb.Privacy.ValueType:
    return pb.Privacy.Value("PRIVACY_" + Privacy(privacy).name)


def privacy_from_pb(value: pb.Privacy.ValueType) -> Privacy:
    if value in (pb.PRIVACY_UNSPECIFIED, pb.PRIVACY_LOCAL_ONLY):
        return Privacy.LOCAL_ONLY
    if value == pb.PRIVACY_EXTERNAL_ALLOWED:
        return Privacy.EXTERNAL_ALLOWED
    raise InvalidArgument("privacy", "is not a known privacy choice")


def operation(row: UserOperation) -> pb.Operation:
    message = pb.Operation(
        id=row.id,
        task_type=row.task_type,
        state=state_to_pb(row.state),
        progress_percent=row.progress_percent,
        attempt=row.attempt,
        max_attempts=row.max_attempts,
        cancel_requested=row.cancel_requested,
        subject=pb.Subject(type=row.subject_type, id=row.subject_id),
        status_url=status_url(row.id),
        created_at=timestamp(row.created_at),
        updated_at=timestamp(row.updated_at),
    )
    for field in ("started_at", "finished_at", "deadline_at", "next_attempt_at"):
        value = getattr(row, field)
        if value is not None:
            getattr(message, field).CopyFrom(timestamp(value))
    if row.not_before > row.created_at:  # scheduled (ADR 0046)
        message.not_before.CopyFrom(timestamp(row.not_before))
    if row.model:
        message.produced_by.CopyFrom(pb.Provenance(model=row.model, route=row.route or ""))
    totals = Usage(row.prompt_tokens, row.completion_tokens, row.model_ms)
    if totals != NO_USAGE:
        message.usage.CopyFrom(usage_to_pb(totals))
    # What the outcome left for the owner to read: only in the state it belongs to (a
    # waiting retry keeps its last code for the operator, not as the owner's answer).
    # Never the failure message: it may quote a model or carry diagnostics.
    if row.state == OperationState.SUCCEEDED:
        message.result_ref = row.result_ref or ""
    elif row.state == OperationState.FAILED:
        message.failure_code = row.failure_code or ""
    return message


NO_USAGE = Usage()


def usage_to_pb(usage: Usage) -> pb.Usage:
    return pb.Usage(
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        model_ms=usage.model_ms,
    )


def usage_from_pb(message: Message, field: str = "usage") -> Usage | None:
    """``message.field`` as a ``Usage``, None when unset (checked by the settlement)."""
    if not message.HasField(field):
        return None
    found: pb.Usage = getattr(message, field)
    return Usage(found.prompt_tokens, found.completion_tokens, found.model_ms)


# ---- requests, as the application layer takes them ---------------------------------------

WaitRequest = pb.WaitOperationRequest | lro.WaitOperationRequest


def _time(message: Message, field: str) -> datetime | None:
    """An optional Timestamp field; one outside its own valid range is the caller's error."""
    if not message.HasField(field):
        return None
    try:
        return from_timestamp(getattr(message, field))
    except ValueError:  # seconds outside years 1 to 9999, or nanos out of range
        raise InvalidArgument(field, "is not a valid timestamp") from None


# protobuf's own bound on a Duration (10,000 years); a larger one cannot be a timedelta.
_DURATION_SECONDS_MAX = 315_576_000_000
_NANOS = 1_000_000_000


def duration(message: Message, field: str) -> timedelta | None:
    """An optional Duration field; one outside protobuf's valid range is the caller's error
    (``ToTimedelta`` would raise OverflowError, or carry nanos of the other sign)."""
    if not message.HasField(field):
        return None
    value = getattr(message, field)
    seconds, nanos = value.seconds, value.nanos
    same_sign = seconds == 0 or nanos == 0 or (seconds > 0) == (nanos > 0)
    if abs(seconds) > _DURATION_SECONDS_MAX or not -_NANOS < nanos < _NANOS or not same_sign:
        raise InvalidArgument(field, "is not a valid duration")
    delta: timedelta = value.ToTimedelta()
    return delta


def create_request(request: pb.CreateOperationRequest, trace_parent: str) -> CreateRequest:
    return CreateRequest(
        task_type=request.task_type,
        idempotency_key=request.idempotency_key,
        subject_type=request.subject.type,
        subject_id=request.subject.id,
        priority=request.priority,
        max_attempts=request.max_attempts or 3,
        retry_delay_seconds=request.retry_delay_seconds or bounds.DEFAULT_RETRY_DELAY_SECONDS,
        privacy=privacy_from_pb(request.privacy),
        context_ref=request.context_ref,
        deadline_at=_time(request, "deadline"),
        not_before=_time(request, "not_before"),
        concurrency_key=request.concurrency_key,
        trace_parent=trace_parent,
    )


def seen(request: pb.WaitOperationRequest) -> datetime | None:
    return _time(request, "seen_updated_at")


def wait_seconds(request: WaitRequest) -> float:
    """The timeout asked for; unset means the most the server waits. Ours says 0 to 30 s;
    google.longrunning's may ask longer (its contract lets the server answer sooner)."""
    timeout = duration(request, "timeout")
    if timeout is None:
        return bounds.WAIT_SECONDS_MAX
    seconds = timeout.total_seconds()
    longest = bounds.WAIT_SECONDS_MAX if isinstance(request, pb.WaitOperationRequest) else None
    if seconds < 0 or (longest is not None and seconds > longest):
        raise InvalidArgument("timeout", f"must be 0 to {bounds.WAIT_SECONDS_MAX:g} seconds")
    return min(seconds, bounds.WAIT_SECONDS_MAX)


def claim_wait_seconds(request: pb.ClaimOperationRequest | pb.ClaimOperationsRequest) -> float:
    wait = duration(request, "wait")
    seconds = 0.0 if wait is None else wait.total_seconds()
    if not 0 <= seconds <= bounds.CLAIM_WAIT_SECONDS_MAX:
        raise InvalidArgument("wait", f"must be 0 to {bounds.CLAIM_WAIT_SECONDS_MAX} seconds")
    return seconds


_ROUTES = {pb.ROUTE_UNSPECIFIED: Route.LOCAL, pb.ROUTE_LOCAL: Route.LOCAL}
_ROUTES[pb.ROUTE_EXTERNAL] = Route.EXTERNAL


def routes(asked: Sequence[pb.Route.ValueType]) -> list[Route]:
    """The routes a claim asked for, in order, each once; unspecified is the local one."""
    if unknown := [value for value in asked if value not in _ROUTES]:
        raise InvalidArgument("routes", f"{unknown[0]} is not a route")
    return list(dict.fromkeys(_ROUTES[value] for value in asked))


def claimed(claim: Claim, route: Route) -> pb.ClaimedOperation:
    row = claim.operation
    assert row.lease_expires_at is not None
    return pb.ClaimedOperation(
        operation=operation(row),
        owner_id=row.owner_user_id,
        lease_token=claim.lease_token,
        lease_expires_at=timestamp(row.lease_expires_at),
        privacy=privacy_to_pb(row.privacy),
        context_ref=row.context_ref or "",
        route=states.route_to_pb(route),
        trace_parent=row.trace_parent or "",
    )


def provenance(message: pb.Provenance) -> Provenance:
    return Provenance(message.provider, message.model, message.route)


def completion(owner: str, request: pb.CompleteOperationRequest) -> Settlement:
    return Settlement(
        owner_id=owner,
        operation_id=request.operation_id,
        token=request.lease_token,
        event=Event.COMPLETE,
        provenance=provenance(request.provenance),
        result_ref=request.result_ref,
    )


def failure(owner: str, request: pb.FailOperationRequest) -> Settlement:
    return Settlement(
        owner_id=owner,
        operation_id=request.operation_id,
        token=request.lease_token,
        event=Event.FAIL_RETRYABLE if request.retryable else Event.FAIL_PERMANENT,
        provenance=provenance(request.provenance),
        failure_code=request.failure_code,
        failure_message=request.failure_message,
        retry_after=duration(request, "retry_after"),
    )


def fallback(owner: str, request: pb.RequestExternalFallbackRequest) -> Settlement:
    return Settlement(
        owner,
        request.operation_id,
        request.lease_token,
        Event.REQUEST_FALLBACK,
        provenance=provenance(request.provenance),
    )


def acknowledgement(owner: str, request: pb.AcknowledgeCancellationRequest) -> Settlement:
    return Settlement(owner, request.operation_id, request.lease_token, Event.ACKNOWLEDGE_CANCEL)


def release(owner: str, request: pb.ReleaseOperationRequest) -> Settlement:
    return Settlement(owner, request.operation_id, request.lease_token, Event.RELEASE)


def settlement(item: pb.SettleOperationsRequest.Item) -> Settlement:
    """One item of the settlement channel, whichever outcome it carries, with its usage."""
    outcome = item.WhichOneof("outcome")
    found: Settlement
    if outcome == "complete":
        found = completion(item.owner_id, item.complete)
    elif outcome == "fail":
        found = failure(item.owner_id, item.fail)
    elif outcome == "fallback":
        found = fallback(item.owner_id, item.fallback)
    elif outcome == "acknowledge_cancel":
        found = acknowledgement(item.owner_id, item.acknowledge_cancel)
    elif outcome == "release":
        found = release(item.owner_id, item.release)
    else:
        raise InvalidArgument(
            "outcome", "is required: complete, fail, fallback, acknowledge_cancel or release"
        )
    usage = usage_from_pb(item)
    return found if usage is None else replace(found, usage=usage)


def outcomes(
    settlements: Sequence[Settlement], answers: Sequence[OperationState | DomainError]
) -> pb.LeaseMutationsResponse:
    """A batch's answers, each item alone: the state it left, or why it was refused."""
    found = []
    for item, answer in zip(settlements, answers, strict=True):
        if isinstance(answer, DomainError):
            found.append(
                pb.LeaseMutationsResponse.Outcome(
                    operation_id=item.operation_id,
                    status_code=status_for(answer).value[0],
                    error_code=answer.code,
                    message=answer.message,
                    usage_charged=isinstance(answer, UsageCharged),
                )
            )
        else:
            found.append(
                pb.LeaseMutationsResponse.Outcome(
                    operation_id=item.operation_id, state=state_to_pb(answer)
                )
            )
    return pb.LeaseMutationsResponse(outcomes=found)


def draft(found: Draft) -> pb.AnswerDraft:
    return pb.AnswerDraft(
        operation_id=found.operation_id,
        attempt=found.attempt,
        text=found.text,
        updated_at=timestamp(found.updated_at),
    )
