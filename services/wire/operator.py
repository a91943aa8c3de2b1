"""Rows ⇄ protobuf messages of the Operator API: the operator's view of an operation."""

from __future__ import annotations

from durable_ops.api.operator.v1 import operator_pb2 as opb
from durable_ops.storage.schema import UserOperation
from durable_ops.wire import operations as convert


def operator_operation(row: UserOperation) -> opb.OperatorOperation:
    """The owner's view, plus what only an operator sees (never the lease token's hash)."""
    message = opb.OperatorOperation(
        operation=convert.operation(row),
        owner_id=row.owner_user_id,
        priority=row.priority,
        privacy=convert.privacy_to_pb(row.privacy),
        failure_code=row.failure_code or "",
        failure_message=row.failure_message or "",
    )
    if row.lease_expires_at is not None:
        message.lease_expires_at.CopyFrom(convert.timestamp(row.lease_expires_at))
    return message
