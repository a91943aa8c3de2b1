"""Privacy snapshots as a claim names them, and the order of a worker's routes.

Only workers read privacy snapshots over gRPC, so that conversion lives here
(the services' own is in ``durable_ops.wire``); routes convert in ``rpc.states``.
"""

from __future__ import annotations

from collections.abc import Sequence

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.model.routing import Route
from durable_ops.model.states import Privacy


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
