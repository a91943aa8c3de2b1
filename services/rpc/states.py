"""``OperationState`` and ``Route`` ⇄ the Operations API's enum values, once for every side.

The gateway and the AI worker use it directly (they reach neither ``wire`` nor
``storage``, tests/unit/test_architecture.py); ``durable_ops.wire.operations``
builds the services' conversions on it.

Each proto value is the domain member's name under ``OPERATION_STATE_``. The
tables are built from those names at import, so a state the proto lacks fails
when the process starts, not on a call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.model.routing import Route
from durable_ops.model.states import OperationState

_PREFIX = "OPERATION_STATE_"
_TO_PB: Final[Mapping[OperationState, pb.OperationState.ValueType]] = {
    state: pb.OperationState.Value(_PREFIX + state.name) for state in OperationState
}
_FROM_PB: Final[Mapping[pb.OperationState.ValueType, OperationState]] = {
    value: state for state, value in _TO_PB.items()
}


def state_to_pb(state: OperationState) -> pb.OperationState.ValueType:
    return _TO_PB[state]


def state_from_pb(value: pb.OperationState.ValueType) -> OperationState:
    """The domain state; ``ValueError`` for unspecified or a number this build does not know.

    A service never answers either: it sends the state the operation is in.
    """
    try:
        return _FROM_PB[value]
    except KeyError:
        raise ValueError(f"not an operation state: {value}") from None


_ROUTE_TO_PB: Final[Mapping[Route, pb.Route.ValueType]] = {
    Route.LOCAL: pb.ROUTE_LOCAL,
    Route.EXTERNAL: pb.ROUTE_EXTERNAL,
}


def route_to_pb(route: Route) -> pb.Route.ValueType:
    return _ROUTE_TO_PB[route]


def route_from_pb(value: pb.Route.ValueType) -> Route:
    """Unspecified is the local route (the proto says so)."""
    return Route.EXTERNAL if value == pb.ROUTE_EXTERNAL else Route.LOCAL
