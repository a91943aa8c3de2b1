"""Request fields the wire converts before any rule runs: a value protobuf can carry but
the field cannot mean is INVALID_ARGUMENT naming the field, never INTERNAL."""

from __future__ import annotations

from datetime import timedelta

import pytest
from google.longrunning import operations_proto_pb2 as lro
from google.protobuf.duration_pb2 import Duration

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.api.operator.v1 import operator_pb2 as opb
from durable_ops.model.errors import InvalidArgument
from durable_ops.model.routing import Route
from durable_ops.wire import operations as wire
from durable_ops.wire.operator import operator_filter, retention_policy

HUGE = 2**62  # fits the field; no timedelta can hold it
INVALID_DURATIONS = [
    pytest.param(Duration(seconds=HUGE), id="too-long"),
    pytest.param(Duration(seconds=-HUGE), id="too-long-back"),
    pytest.param(Duration(seconds=1, nanos=-5), id="nanos-of-the-other-sign"),
    pytest.param(Duration(seconds=1, nanos=2_000_000_000), id="nanos-past-a-second"),
]


def _refused(field: str, call: object) -> None:
    with pytest.raises(InvalidArgument) as caught:
        call()  # type: ignore[operator]
    assert caught.value.field == field


@pytest.mark.parametrize("value", INVALID_DURATIONS)
def test_a_duration_no_timedelta_can_hold_is_refused_in_every_request(value: Duration) -> None:
    _refused("wait", lambda: wire.claim_wait_seconds(pb.ClaimOperationRequest(wait=value)))
    _refused("timeout", lambda: wire.wait_seconds(pb.WaitOperationRequest(timeout=value)))
    _refused("timeout", lambda: wire.wait_seconds(lro.WaitOperationRequest(timeout=value)))
    listing = opb.ListOperationsRequest(older_than=value)
    _refused("older_than", lambda: operator_filter(listing))
    prune = opb.PruneOperationsRequest(older_than=Duration(seconds=86_400))
    prune.tombstones_older_than.CopyFrom(value)
    _refused("tombstones_older_than", lambda: retention_policy(prune, timedelta(days=1)))


def test_a_valid_duration_reads_as_its_timedelta() -> None:
    asked = Duration(seconds=2, nanos=500_000_000)
    assert wire.duration(pb.ClaimOperationRequest(wait=asked), "wait") == timedelta(seconds=2.5)
    assert wire.duration(pb.ClaimOperationRequest(), "wait") is None


def test_our_wait_refuses_past_30_seconds_where_google_longrunning_may_ask_longer() -> None:
    longer = Duration(seconds=31)
    _refused("timeout", lambda: wire.wait_seconds(pb.WaitOperationRequest(timeout=longer)))
    assert wire.wait_seconds(lro.WaitOperationRequest(timeout=longer)) == 30.0
    assert wire.wait_seconds(pb.WaitOperationRequest(timeout=Duration(seconds=30))) == 30.0
    assert wire.wait_seconds(pb.WaitOperationRequest()) == 30.0


def test_a_claim_names_known_routes_only() -> None:
    assert wire.routes([pb.ROUTE_EXTERNAL, pb.ROUTE_UNSPECIFIED, pb.ROUTE_LOCAL]) == [
        Route.EXTERNAL,
        Route.LOCAL,
    ]
    for unknown in (99, -1):
        _refused("routes", lambda unknown=unknown: wire.routes([pb.ROUTE_LOCAL, unknown]))
