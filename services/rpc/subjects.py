"""The Workspace read of one subject, as its gRPC clients (the gateway, the AI worker) ask it.

A ``SubjectKind`` names the Workspace RPC that reads one of the owner's
(``workspace_read``); the request's fields are the id and the lease a worker
reads under (``LEASE_FIELDS``, ADR 62), and the reply carries the kind's text
fields. Nothing here names a kind, so a registered kind is read without a line
of its own (``tests/unit/test_subjects.py`` checks every registered kind
against the proto).
"""

from __future__ import annotations

from typing import Any

from google.protobuf import message_factory
from google.protobuf.message import Message

from durable_ops.api.workspace.v1 import workspace_pb2 as workspace_pb
from durable_ops.model.scope import ReadLease
from durable_ops.model.subjects import SubjectKind

WORKSPACE_SERVICE = workspace_pb.DESCRIPTOR.services_by_name["WorkspaceService"]
# Beside the id, every subject read names the lease a worker reads under.
LEASE_FIELDS = frozenset({"operation_id", "lease_token"})


def read_method(stub: Any, kind: SubjectKind) -> Any:
    """The stub's method reading one of ``kind`` (a ``WorkspaceServiceStub``'s, sync or aio)."""
    return getattr(stub, kind.workspace_read)


def read_request(kind: SubjectKind, subject_id: str, lease: ReadLease | None = None) -> Message:
    """The request of ``kind``'s Workspace read for ``subject_id``: the gateway's without a
    lease, a worker's under the ``lease`` of the operation it runs."""
    method = WORKSPACE_SERVICE.methods_by_name[kind.workspace_read]
    (id_field,) = (field for field in method.input_type.fields if field.name not in LEASE_FIELDS)
    fields = {id_field.name: subject_id}
    if lease is not None:
        fields |= {"operation_id": lease.operation_id, "lease_token": lease.token}
    request: Message = message_factory.GetMessageClass(method.input_type)(**fields)
    return request
