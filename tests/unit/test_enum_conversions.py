"""Domain enums ⇄ the Operations API's enum values, on both sides of the gRPC boundary."""

from __future__ import annotations

import pytest

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.gateway import dto
from durable_ops.model.errors import InvalidArgument
from durable_ops.model.routing import Route
from durable_ops.model.states import OperationState, Privacy
from durable_ops.rpc import states
from durable_ops.rpc.states import route_to_pb
from durable_ops.wire import operations as wire
from durable_ops.worker.attempt import privacy_from_pb

UNKNOWN_STATE = pb.OperationState.ValueType(99)


@pytest.mark.parametrize("state", list(OperationState))
def test_every_state_crosses_the_wire_and_back_on_both_sides(state: OperationState) -> None:
    value = states.state_to_pb(state)
    assert pb.OperationState.Name(value) == "OPERATION_STATE_" + state.name
    assert wire.state_to_pb(state) == wire.state_to_pb(state.value) == value
    assert states.state_from_pb(value) is wire.state_from_pb(value) is state
    assert dto.state_value(state.value) == value
    assert dto.state_name(value) == state.value


def test_a_client_refuses_unspecified_and_unknown_states() -> None:
    for value in (pb.OPERATION_STATE_UNSPECIFIED, UNKNOWN_STATE):
        with pytest.raises(ValueError, match="not an operation state"):
            states.state_from_pb(value)
    with pytest.raises(ValueError, match="is not a valid OperationState"):
        dto.state_value("RUNNING")  # API names are the lower-case domain values


def test_the_service_reads_unspecified_as_no_filter_and_refuses_unknown_states() -> None:
    assert wire.state_from_pb(pb.OPERATION_STATE_UNSPECIFIED) is None
    with pytest.raises(InvalidArgument):
        wire.state_from_pb(UNKNOWN_STATE)


@pytest.mark.parametrize("privacy", list(Privacy))
def test_every_privacy_choice_crosses_the_wire_and_back(privacy: Privacy) -> None:
    value = wire.privacy_to_pb(privacy)
    assert wire.privacy_from_pb(value) is privacy_from_pb(value) is privacy


def test_unspecified_privacy_is_the_stricter_choice_on_both_sides() -> None:
    assert wire.privacy_from_pb(pb.PRIVACY_UNSPECIFIED) is Privacy.LOCAL_ONLY
    assert privacy_from_pb(pb.PRIVACY_UNSPECIFIED) is Privacy.LOCAL_ONLY


def test_every_route_has_its_own_proto_value() -> None:
    assert {route: route_to_pb(route) for route in Route} == {
        Route.LOCAL: pb.ROUTE_LOCAL,
        Route.EXTERNAL: pb.ROUTE_EXTERNAL,
    }
