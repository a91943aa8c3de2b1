import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class OperationState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OPERATION_STATE_UNSPECIFIED: _ClassVar[OperationState]
    OPERATION_STATE_QUEUED: _ClassVar[OperationState]
    OPERATION_STATE_RUNNING: _ClassVar[OperationState]
    OPERATION_STATE_WAITING_FOR_RETRY: _ClassVar[OperationState]
    OPERATION_STATE_WAITING_FOR_EXTERNAL_FALLBACK: _ClassVar[OperationState]
    OPERATION_STATE_SUCCEEDED: _ClassVar[OperationState]
    OPERATION_STATE_FAILED: _ClassVar[OperationState]
    OPERATION_STATE_CANCELLED: _ClassVar[OperationState]

class Privacy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PRIVACY_UNSPECIFIED: _ClassVar[Privacy]
    PRIVACY_LOCAL_ONLY: _ClassVar[Privacy]
    PRIVACY_EXTERNAL_ALLOWED: _ClassVar[Privacy]

class Route(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ROUTE_UNSPECIFIED: _ClassVar[Route]
    ROUTE_LOCAL: _ClassVar[Route]
    ROUTE_EXTERNAL: _ClassVar[Route]
OPERATION_STATE_UNSPECIFIED: OperationState
OPERATION_STATE_QUEUED: OperationState
OPERATION_STATE_RUNNING: OperationState
OPERATION_STATE_WAITING_FOR_RETRY: OperationState
OPERATION_STATE_WAITING_FOR_EXTERNAL_FALLBACK: OperationState
OPERATION_STATE_SUCCEEDED: OperationState
OPERATION_STATE_FAILED: OperationState
OPERATION_STATE_CANCELLED: OperationState
PRIVACY_UNSPECIFIED: Privacy
PRIVACY_LOCAL_ONLY: Privacy
PRIVACY_EXTERNAL_ALLOWED: Privacy
ROUTE_UNSPECIFIED: Route
ROUTE_LOCAL: Route
ROUTE_EXTERNAL: Route

class Subject(_message.Message):
    __slots__ = ("type", "id")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    type: str
    id: str
    def __init__(self, type: _Optional[str] = ..., id: _Optional[str] = ...) -> None: ...

class Operation(_message.Message):
    __slots__ = ("id", "task_type", "state", "progress_percent", "attempt", "max_attempts", "cancel_requested", "subject", "status_url", "created_at", "updated_at", "started_at", "finished_at", "deadline_at", "next_attempt_at")
    ID_FIELD_NUMBER: _ClassVar[int]
    TASK_TYPE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_PERCENT_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    CANCEL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    STATUS_URL_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_AT_FIELD_NUMBER: _ClassVar[int]
    NEXT_ATTEMPT_AT_FIELD_NUMBER: _ClassVar[int]
    id: str
    task_type: str
    state: OperationState
    progress_percent: int
    attempt: int
    max_attempts: int
    cancel_requested: bool
    subject: Subject
    status_url: str
    created_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    started_at: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    deadline_at: _timestamp_pb2.Timestamp
    next_attempt_at: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., task_type: _Optional[str] = ..., state: _Optional[_Union[OperationState, str]] = ..., progress_percent: _Optional[int] = ..., attempt: _Optional[int] = ..., max_attempts: _Optional[int] = ..., cancel_requested: _Optional[bool] = ..., subject: _Optional[_Union[Subject, _Mapping]] = ..., status_url: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., deadline_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., next_attempt_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Provenance(_message.Message):
    __slots__ = ("provider", "model", "route")
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    provider: str
    model: str
    route: str
    def __init__(self, provider: _Optional[str] = ..., model: _Optional[str] = ..., route: _Optional[str] = ...) -> None: ...

class CreateOperationRequest(_message.Message):
    __slots__ = ("task_type", "idempotency_key", "subject", "priority", "max_attempts", "retry_delay_seconds", "deadline", "privacy", "context_ref")
    TASK_TYPE_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    RETRY_DELAY_SECONDS_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    PRIVACY_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_REF_FIELD_NUMBER: _ClassVar[int]
    task_type: str
    idempotency_key: str
    subject: Subject
    priority: int
    max_attempts: int
    retry_delay_seconds: int
    deadline: _timestamp_pb2.Timestamp
    privacy: Privacy
    context_ref: str
    def __init__(self, task_type: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., subject: _Optional[_Union[Subject, _Mapping]] = ..., priority: _Optional[int] = ..., max_attempts: _Optional[int] = ..., retry_delay_seconds: _Optional[int] = ..., deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., privacy: _Optional[_Union[Privacy, str]] = ..., context_ref: _Optional[str] = ...) -> None: ...

class CreateOperationResponse(_message.Message):
    __slots__ = ("operation", "created")
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    operation: Operation
    created: bool
    def __init__(self, operation: _Optional[_Union[Operation, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class GetOperationRequest(_message.Message):
    __slots__ = ("operation_id",)
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    def __init__(self, operation_id: _Optional[str] = ...) -> None: ...

class ListOperationsRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "state", "task_type")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TASK_TYPE_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    state: OperationState
    task_type: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., state: _Optional[_Union[OperationState, str]] = ..., task_type: _Optional[str] = ...) -> None: ...

class ListOperationsResponse(_message.Message):
    __slots__ = ("operations", "next_page_token")
    OPERATIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    operations: _containers.RepeatedCompositeFieldContainer[Operation]
    next_page_token: str
    def __init__(self, operations: _Optional[_Iterable[_Union[Operation, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class CancelOperationRequest(_message.Message):
    __slots__ = ("operation_id",)
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    def __init__(self, operation_id: _Optional[str] = ...) -> None: ...

class RetryOperationRequest(_message.Message):
    __slots__ = ("operation_id",)
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    def __init__(self, operation_id: _Optional[str] = ...) -> None: ...

class ClaimOperationRequest(_message.Message):
    __slots__ = ("task_types", "lease_seconds", "route")
    TASK_TYPES_FIELD_NUMBER: _ClassVar[int]
    LEASE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    task_types: _containers.RepeatedScalarFieldContainer[str]
    lease_seconds: int
    route: Route
    def __init__(self, task_types: _Optional[_Iterable[str]] = ..., lease_seconds: _Optional[int] = ..., route: _Optional[_Union[Route, str]] = ...) -> None: ...

class ClaimedOperation(_message.Message):
    __slots__ = ("operation", "owner_id", "lease_token", "lease_expires_at", "privacy", "context_ref")
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    OWNER_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    PRIVACY_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_REF_FIELD_NUMBER: _ClassVar[int]
    operation: Operation
    owner_id: str
    lease_token: str
    lease_expires_at: _timestamp_pb2.Timestamp
    privacy: Privacy
    context_ref: str
    def __init__(self, operation: _Optional[_Union[Operation, _Mapping]] = ..., owner_id: _Optional[str] = ..., lease_token: _Optional[str] = ..., lease_expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., privacy: _Optional[_Union[Privacy, str]] = ..., context_ref: _Optional[str] = ...) -> None: ...

class ClaimOperationResponse(_message.Message):
    __slots__ = ("claimed",)
    CLAIMED_FIELD_NUMBER: _ClassVar[int]
    claimed: ClaimedOperation
    def __init__(self, claimed: _Optional[_Union[ClaimedOperation, _Mapping]] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("operation_id", "lease_token", "progress_percent", "lease_seconds")
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_PERCENT_FIELD_NUMBER: _ClassVar[int]
    LEASE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    lease_token: str
    progress_percent: int
    lease_seconds: int
    def __init__(self, operation_id: _Optional[str] = ..., lease_token: _Optional[str] = ..., progress_percent: _Optional[int] = ..., lease_seconds: _Optional[int] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("lease_expires_at", "cancel_requested")
    LEASE_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    CANCEL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    lease_expires_at: _timestamp_pb2.Timestamp
    cancel_requested: bool
    def __init__(self, lease_expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., cancel_requested: _Optional[bool] = ...) -> None: ...

class CompleteOperationRequest(_message.Message):
    __slots__ = ("operation_id", "lease_token", "provenance", "result_ref")
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    PROVENANCE_FIELD_NUMBER: _ClassVar[int]
    RESULT_REF_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    lease_token: str
    provenance: Provenance
    result_ref: str
    def __init__(self, operation_id: _Optional[str] = ..., lease_token: _Optional[str] = ..., provenance: _Optional[_Union[Provenance, _Mapping]] = ..., result_ref: _Optional[str] = ...) -> None: ...

class FailOperationRequest(_message.Message):
    __slots__ = ("operation_id", "lease_token", "retryable", "failure_code", "failure_message", "provenance")
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    FAILURE_CODE_FIELD_NUMBER: _ClassVar[int]
    FAILURE_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PROVENANCE_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    lease_token: str
    retryable: bool
    failure_code: str
    failure_message: str
    provenance: Provenance
    def __init__(self, operation_id: _Optional[str] = ..., lease_token: _Optional[str] = ..., retryable: _Optional[bool] = ..., failure_code: _Optional[str] = ..., failure_message: _Optional[str] = ..., provenance: _Optional[_Union[Provenance, _Mapping]] = ...) -> None: ...

class RequestExternalFallbackRequest(_message.Message):
    __slots__ = ("operation_id", "lease_token", "provenance")
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    PROVENANCE_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    lease_token: str
    provenance: Provenance
    def __init__(self, operation_id: _Optional[str] = ..., lease_token: _Optional[str] = ..., provenance: _Optional[_Union[Provenance, _Mapping]] = ...) -> None: ...

class LeaseMutationResponse(_message.Message):
    __slots__ = ("state",)
    STATE_FIELD_NUMBER: _ClassVar[int]
    state: OperationState
    def __init__(self, state: _Optional[_Union[OperationState, str]] = ...) -> None: ...

class AcknowledgeCancellationRequest(_message.Message):
    __slots__ = ("operation_id", "lease_token")
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    lease_token: str
    def __init__(self, operation_id: _Optional[str] = ..., lease_token: _Optional[str] = ...) -> None: ...
