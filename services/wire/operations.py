"""Rows and domain values ⇄ protobuf messages of the Operations API."""

from __future__ import annotations

from datetime import UTC, datetime

from google.protobuf.timestamp_pb2 import Timestamp

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.model.errors import InvalidArgument
from durable_ops.model.states import OperationState, Privacy
from durable_ops.rpc import states
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
    if row.model:
        message.produced_by.CopyFrom(pb.Provenance(model=row.model, route=row.route or ""))
    return message
