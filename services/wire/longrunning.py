"""Operation rows ⇄ ``google.longrunning.Operation``.

``name`` is ``operations/{id}``; ``done`` is true exactly in the terminal
states; ``metadata`` packs the owner's ``Operation``; a success packs an
``OperationResult`` (where the result is: its reference, not the result); a cancel is
``CANCELLED`` and a failure a mapped code with ``ErrorInfo{reason: failure
code}``. The stored failure text never leaves: it may quote a model.
"""

from __future__ import annotations

from google.longrunning import operations_proto_pb2 as lro
from google.protobuf.any_pb2 import Any as AnyMessage
from google.rpc import code_pb2, error_details_pb2, status_pb2

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.model import bounds
from durable_ops.model.errors import InvalidArgument
from durable_ops.model.lifecycle import DEADLINE_FAILURE_CODE, LEASE_FAILURE_CODE
from durable_ops.model.states import OperationState
from durable_ops.storage.schema import UserOperation
from durable_ops.wire import operations as convert

NAME_PREFIX = "operations/"
COLLECTION = "operations"
ERROR_DOMAIN = "durable-ops"
# Failure codes a worker or the sweeper writes, as the nearest google.rpc.Code.
_CODE_BY_FAILURE = {
    DEADLINE_FAILURE_CODE: code_pb2.DEADLINE_EXCEEDED,
    "task_timeout": code_pb2.DEADLINE_EXCEEDED,
    LEASE_FAILURE_CODE: code_pb2.ABORTED,
    "subject_not_found": code_pb2.NOT_FOUND,
    "invalid_input": code_pb2.INVALID_ARGUMENT,
    "not_entitled": code_pb2.PERMISSION_DENIED,
    "ai_disabled": code_pb2.PERMISSION_DENIED,
    "ai_unavailable": code_pb2.UNAVAILABLE,
}


def name_of(operation_id: str) -> str:
    return NAME_PREFIX + operation_id


def id_from_name(name: str) -> str:
    operation_id = name.removeprefix(NAME_PREFIX)
    if operation_id == name or not operation_id:
        raise InvalidArgument("name", f'must be "{NAME_PREFIX}{{id}}"')
    if len(operation_id) > bounds.ID_MAX:
        raise InvalidArgument("name", f"names an id longer than {bounds.ID_MAX} characters")
    return operation_id


def failure_status(failure_code: str) -> status_pb2.Status:
    info = error_details_pb2.ErrorInfo(reason=failure_code, domain=ERROR_DOMAIN)
    detail = AnyMessage()
    detail.Pack(info)
    code = _CODE_BY_FAILURE.get(failure_code, code_pb2.UNKNOWN)
    return status_pb2.Status(
        code=code, message=f"The operation failed ({failure_code}).", details=[detail]
    )


def operation(row: UserOperation) -> lro.Operation:
    message = lro.Operation(name=name_of(row.id), done=OperationState(row.state).is_terminal)
    message.metadata.Pack(convert.operation(row))
    if row.state == OperationState.SUCCEEDED:
        message.response.Pack(
            pb.OperationResult(
                task_type=row.task_type,
                subject=pb.Subject(type=row.subject_type, id=row.subject_id),
                status_url=convert.status_url(row.id),
                result_ref=row.result_ref or "",
            )
        )
    elif row.state == OperationState.CANCELLED:
        message.error.CopyFrom(
            status_pb2.Status(code=code_pb2.CANCELLED, message="The operation was cancelled.")
        )
    elif row.state == OperationState.FAILED:
        message.error.CopyFrom(failure_status(row.failure_code or "unknown"))
    return message
