"""Routes and privacy snapshots as a claim names them, converted once for any worker.

Only workers speak of routes and read privacy snapshots over gRPC, so these
conversions live here (the services' own are in ``durable_ops.wire``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.model.routing import Route
from durable_ops.model.states import Privacy

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


def rotated(routes: Sequence[Route], turn: int) -> list[Route]:
    """``routes`` starting at ``turn`` (modulo their number), the rest following in order.

    A claim fills its routes in order, so a worker holding several starts each
    claim with the next one: work waiting on a later route is served even while
    the first keeps receiving more.
    """
    if not routes:
        return []
    start = turn % len(routes)
    return [*routes[start:], *routes[:start]]
