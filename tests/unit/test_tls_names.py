"""The name TLS checks a certificate for: a list target's first address, not the list
(gRPC's own choice, which no certificate holds), and the resolved name of a replica."""

from __future__ import annotations

import pytest

from durable_ops.model.addresses import first_listed_address
from durable_ops.rpc.tls import checked_name_options

OVERRIDE = "grpc.ssl_target_name_override"


@pytest.mark.parametrize(
    ("target", "first"),
    [
        ("ipv4:10.0.0.5:50051,10.0.0.6:50051", "10.0.0.5:50051"),
        ("ipv4:10.0.0.5:50051", "10.0.0.5:50051"),
        ("ipv4:10.0.0.5,10.0.0.6", "10.0.0.5"),  # gRPC's default port, 443
        ("ipv6:[fd00::5]:50051,[fd00::6]:50051", "[fd00::5]:50051"),
        ("ipv4:", None),
        ("10.0.0.5:50051", None),  # one address: gRPC checks its host already
        ("operations:50051", None),
        ("dns:///ops.example.com:443", None),
        ("[fd00::5]:50051", None),
    ],
)
def test_a_list_target_is_checked_for_its_first_address(target: str, first: str | None) -> None:
    assert first_listed_address(target) == first


def test_the_override_is_the_first_listed_address_unless_a_name_is_given() -> None:
    listed = "ipv4:10.0.0.5:50051,10.0.0.6:50051"
    assert checked_name_options(listed) == ((OVERRIDE, "10.0.0.5:50051"),)
    assert checked_name_options(listed, "ops-grpc.internal") == ((OVERRIDE, "ops-grpc.internal"),)
    assert checked_name_options("ipv4:10.0.0.5:50051", "operations") == ((OVERRIDE, "operations"),)
    assert checked_name_options("operations:50051") == ()
