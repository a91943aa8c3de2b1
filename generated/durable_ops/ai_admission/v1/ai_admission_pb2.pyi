from durable_ops.operations.v1 import operations_pb2 as _operations_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AdmitRequest(_message.Message):
    __slots__ = ("task_type", "subject_id", "context_ref", "idempotency_key")
    TASK_TYPE_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_ID_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_REF_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    task_type: str
    subject_id: str
    context_ref: str
    idempotency_key: str
    def __init__(self, task_type: _Optional[str] = ..., subject_id: _Optional[str] = ..., context_ref: _Optional[str] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class AdmitResponse(_message.Message):
    __slots__ = ("operation", "reused", "status_url")
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    REUSED_FIELD_NUMBER: _ClassVar[int]
    STATUS_URL_FIELD_NUMBER: _ClassVar[int]
    operation: _operations_pb2.Operation
    reused: bool
    status_url: str
    def __init__(self, operation: _Optional[_Union[_operations_pb2.Operation, _Mapping]] = ..., reused: _Optional[bool] = ..., status_url: _Optional[str] = ...) -> None: ...

class LookupRequest(_message.Message):
    __slots__ = ("task_type", "subject_id")
    TASK_TYPE_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_ID_FIELD_NUMBER: _ClassVar[int]
    task_type: str
    subject_id: str
    def __init__(self, task_type: _Optional[str] = ..., subject_id: _Optional[str] = ...) -> None: ...

class LookupResponse(_message.Message):
    __slots__ = ("operation",)
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    operation: _operations_pb2.Operation
    def __init__(self, operation: _Optional[_Union[_operations_pb2.Operation, _Mapping]] = ...) -> None: ...
