"""A claimed operation as the worker holds it, converted once from the claim reply."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.model.routing import Route
from durable_ops.model.states import Privacy

# Only the worker speaks of routes and reads privacy snapshots over gRPC, so
# these two conversions live here (the services' own are in durable_ops.wire).
_ROUTE_TO_PB: Final[Mapping[Route, pb.Route.ValueType]] = {
    Route.LOCAL: pb.ROUTE_LOCAL,
    Route.EXTERNAL: pb.ROUTE_EXTERNAL,
}


def route_to_pb(route: Route) -> pb.Route.ValueType:
    return _ROUTE_TO_PB[route]


def route_from_pb(value: pb.Route.ValueType) -> Route:
    return Route.EXTERNAL if value == pb.ROUTE_EXTERNAL else Route.LOCAL


def privacy_from_pb(value: pb.Privacy.ValueType) -> Privacy:
    # Unspecified is treated as the stricter choice (the proto says so).
    if value == pb.PRIVACY_EXTERNAL_ALLOWED:
        return Privacy.EXTERNAL_ALLOWED
    return Privacy.LOCAL_ONLY


@dataclass(frozen=True)
class ClaimedOperation:
    operation_id: str
    owner_id: str
    lease_token: str = field(repr=False)  # a bearer secret: never logged
    task_type: str
    subject_type: str
    subject_id: str
    context_ref: str
    privacy: Privacy  # the snapshot taken at admission
    attempt: int
    route: Route  # which claim took it: local, or external (from the fallback state)
    # The creating request's W3C traceparent ("" untraced): the worker's spans link to it.
    trace_parent: str = ""

    @classmethod
    def from_pb(cls, claimed: pb.ClaimedOperation) -> ClaimedOperation:
        operation = claimed.operation
        return cls(
            operation_id=operation.id,
            owner_id=claimed.owner_id,
            lease_token=claimed.lease_token,
            task_type=operation.task_type,
            subject_type=operation.subject.type,
            subject_id=operation.subject.id,
            context_ref=claimed.context_ref,
            privacy=privacy_from_pb(claimed.privacy),
            attempt=operation.attempt,
            route=route_from_pb(claimed.route),
            trace_parent=claimed.trace_parent,
        )

    def log_fields(self) -> dict[str, object]:
        """What a log event may say about this operation (ids only, never content)."""
        return {
            "operation_id": self.operation_id,
            "owner": self.owner_id,
            "task_type": self.task_type,
            "attempt": self.attempt,
            "route": self.route.value,
        }
