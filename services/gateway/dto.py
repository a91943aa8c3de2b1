"""Wire shapes (SPEC §5): protobuf messages -> JSON-ready dicts, times as RFC 3339.

Times are UTC with microseconds, e.g. ``2026-11-30T12:00:00.123456Z``, and
``null`` when unset. The Operation DTO lists its fields explicitly so that
nothing the proto carries or grows later (lease, provenance, failure text, result
reference) can reach a client by accident: which model made a result travels
with the result (``gateway.ai``), never with the operation.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp

from durable_ops.api.notifications.v1 import notifications_pb2
from durable_ops.api.operations.v1 import operations_pb2
from durable_ops.model.states import OperationState
from durable_ops.rpc.states import state_from_pb, state_to_pb

STATE_NAMES: tuple[str, ...] = tuple(state.value for state in OperationState)


def rfc3339(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


_RFC3339 = re.compile(
    r"(\d{4}-\d{2}-\d{2})[Tt](\d{2}:\d{2}:\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})", re.ASCII
)


def parse_rfc3339(text: str) -> datetime:
    """An RFC 3339 time (any fraction, ``Z`` or an offset) as aware UTC; ``ValueError`` else.

    Finer than microseconds is cut off: it reads back every time ``rfc3339`` writes.
    """
    match = _RFC3339.fullmatch(text)
    if match is None:
        raise ValueError("not an RFC 3339 time")
    day, clock, fraction, offset = match.groups()
    micros = (fraction or "")[:6].ljust(6, "0")
    zone = "+00:00" if offset in ("Z", "z") else offset
    try:
        return datetime.fromisoformat(f"{day}T{clock}.{micros}{zone}").astimezone(UTC)
    except OverflowError:  # an offset that moves year 1 or 9999 out of range
        raise ValueError("out of range") from None


def time_or_none(message: Message, field: str) -> str | None:
    """``message.field`` as RFC 3339, or ``None`` when the Timestamp field is unset."""
    if not message.HasField(field):
        return None
    stamp: Timestamp = getattr(message, field)
    return rfc3339(stamp.ToDatetime(tzinfo=UTC))


def state_name(value: operations_pb2.OperationState.ValueType) -> str:
    """The API name of a proto state (``OPERATION_STATE_RUNNING`` -> ``running``)."""
    return state_from_pb(value).value


def state_value(name: str) -> operations_pb2.OperationState.ValueType:
    """The proto value of an API state name; ``ValueError`` for an unknown one."""
    return state_to_pb(OperationState(name))


def operation(message: operations_pb2.Operation) -> dict[str, Any]:
    return {
        "id": message.id,
        "task_type": message.task_type,
        "state": state_name(message.state),
        "progress_percent": message.progress_percent,
        "attempt": message.attempt,
        "max_attempts": message.max_attempts,
        "cancel_requested": message.cancel_requested,
        "subject": {"type": message.subject.type, "id": message.subject.id},
        "status_url": message.status_url,
        "created_at": time_or_none(message, "created_at"),
        "updated_at": time_or_none(message, "updated_at"),
        "started_at": time_or_none(message, "started_at"),
        "finished_at": time_or_none(message, "finished_at"),
        "deadline_at": time_or_none(message, "deadline_at"),
        "next_attempt_at": time_or_none(message, "next_attempt_at"),
        "not_before": time_or_none(message, "not_before"),  # scheduled: not claimed before
        "usage": usage(message.usage) if message.HasField("usage") else None,
    }


def usage(message: operations_pb2.Usage) -> dict[str, Any]:
    """An operation's totals over its attempts (SPEC §5): tokens, and the model's own time
    in seconds (stored in milliseconds)."""
    return {
        "prompt_tokens": message.prompt_tokens,
        "completion_tokens": message.completion_tokens,
        "model_seconds": message.model_ms / 1000,
    }


def notification(message: notifications_pb2.Notification) -> dict[str, Any]:
    return {
        "id": message.id,
        "operation_id": message.operation_id or None,
        "task_type": message.task_type,
        "outcome": message.outcome,
        "title": message.title,
        "body": message.body,
        "created_at": time_or_none(message, "created_at"),
        "read_at": time_or_none(message, "read_at"),
    }
