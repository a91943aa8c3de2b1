"""A target that lists addresses beyond loopback (``ipv4:A:P,B:P``) works over TLS.

Two replicas of the product's gRPC server (``tests.support.tls_replica``), each in a
network namespace of its own, serve TLS with one certificate that names both addresses,
as ``opsctl keys init --tls-name A --tls-name B`` makes it. The services' client
(``open_channel``, round robin) reaches both through the list, and so does ``opsctl``'s
channel; replicas whose certificate, from the same authority, names neither address are
refused. Before, gRPC checked the whole list as one host name and refused every
certificate (docs/operations.md, "Client-side round robin"). Needs root and iproute2;
skipped without them.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from durable_ops.model.scope import Role
from durable_ops.operator_cli import Operator
from durable_ops.rpc.client import ServiceCaller, open_channel
from durable_ops.rpc.keys import SigningKey, ensure_role_keys, private_key_path
from durable_ops.rpc.tls import CA_CERT, CA_KEY, ensure_tls
from durable_ops.settings import Settings
from tests.partition.netns import Network, unavailable

PORT = 50051  # each replica is alone in its namespace
REPLICA = "replica."  # replica N lists "replica.N" as its service: a client sees who answered
STARTED_SECONDS = 20.0  # a replica's process importing the product and binding


@contextmanager
def _network(tag: str, prefix: str) -> Iterator[Network]:
    """Two namespaces on a bridge whose root-namespace address is the clients'. Each test
    has its own names and subnet (clear of the partition tests' 10.77.0-3), so two test
    processes may run them at once."""
    reason = unavailable()
    if reason is not None:
        pytest.skip(reason)
    made = Network(tag, prefix, nodes=2, between_nodes=False)
    try:
        made.up()
        yield made
    finally:
        made.down()


def _name(node: int) -> str:
    return f"{REPLICA}{node}"


def _list_target(network: Network) -> str:
    return "ipv4:" + ",".join(f"{network.address(i)}:{PORT}" for i in network.indexes)


def _keys_naming(keys: Path, names: list[str]) -> Path:
    ensure_role_keys(keys)
    ensure_tls(keys, names)
    return keys


@contextmanager
def _replicas(network: Network, keys: Path) -> Iterator[str]:
    """Replica N serving TLS with the certificate in ``keys`` at node N's address, until
    the block ends; yields the target listing them all."""
    processes = [
        subprocess.Popen(
            [
                *("ip", "netns", "exec", network.namespace(i)),
                *(sys.executable, "-m", "tests.support.tls_replica"),
                *(f"{network.address(i)}:{PORT}", str(keys), _name(i)),
            ],
            stdout=subprocess.DEVNULL,
        )
        for i in network.indexes
    ]
    try:
        for i, process in zip(network.indexes, processes, strict=True):
            _wait_listening(network.address(i), process)
        yield _list_target(network)
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(10)


def _wait_listening(address: str, process: subprocess.Popen[bytes]) -> None:
    """Until ``address`` accepts a connection from here: the replica serves, and the path
    to its namespace works."""
    deadline = time.monotonic() + STARTED_SECONDS
    while time.monotonic() < deadline:
        assert process.poll() is None, f"the replica at {address} ended: {process.returncode}"
        try:
            socket.create_connection((address, PORT), timeout=1).close()
        except OSError:
            time.sleep(0.1)
        else:
            return
    raise AssertionError(f"no replica listening at {address}:{PORT}")


def _replica_of(answer: reflection_pb2.ServerReflectionResponse) -> set[str]:
    """The replica that answered a ``list_services`` request."""
    services = answer.list_services_response.service
    return {service.name for service in services if service.name.startswith(REPLICA)}


async def _replicas_answering(target: str, ca: Path, caller: ServiceCaller) -> set[str]:
    """Which replicas answer the services' channel to ``target``, over a few calls."""
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    seen: set[str] = set()
    async with open_channel(target, ca) as channel:
        reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
        for _ in range(20):  # round robin: both after two calls, once both are connected
            call = reflection.ServerReflectionInfo(
                iter([request]), metadata=caller.metadata(), timeout=5
            )
            async for answer in call:
                seen |= _replica_of(answer)
            if len(seen) == 2:
                break
    return seen


def test_a_list_of_addresses_beyond_loopback_is_served_over_tls(tmp_path: Path) -> None:
    with _network("tlsa", "10.77.8") as network:
        addresses = [network.address(i) for i in network.indexes]
        keys = _keys_naming(tmp_path / "keys", addresses)
        caller = ServiceCaller(SigningKey.load(private_key_path(keys, Role.GATEWAY.value)))
        with _replicas(network, keys) as target:
            assert target == f"ipv4:{addresses[0]}:{PORT},{addresses[1]}:{PORT}"
            seen = asyncio.run(_replicas_answering(target, keys / CA_CERT, caller))
            assert seen == {_name(1), _name(2)}

            # opsctl's own channel (OPS_OPERATIONS_TARGET), one replica at a time.
            settings = Settings(operations_target=target, service_keys_dir=str(keys))
            connection = Operator(settings, "ops-carol").connection
            with connection.channel:
                answers = reflection_pb2_grpc.ServerReflectionStub(
                    connection.channel
                ).ServerReflectionInfo(
                    iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
                    metadata=connection.metadata,
                    timeout=5,
                )
                assert _replica_of(next(answers)) in ({_name(1)}, {_name(2)})


def test_a_certificate_naming_none_of_the_listed_addresses_is_refused(tmp_path: Path) -> None:
    async def check(target: str, ca: Path) -> None:
        async with open_channel(target, ca) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            await health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)

    with _network("tlsb", "10.77.9") as network:
        addresses = [network.address(i) for i in network.indexes]
        trusted = _keys_naming(tmp_path / "keys", addresses)
        # The same authority's certificate, for loopback and the Compose names only.
        stranger = tmp_path / "stranger"
        ensure_role_keys(stranger)
        for part in (CA_CERT, CA_KEY):
            (stranger / part).parent.mkdir(exist_ok=True)
            shutil.copy2(trusted / part, stranger / part)
        ensure_tls(stranger)
        with _replicas(network, stranger) as target, pytest.raises(grpc.RpcError) as refused:
            asyncio.run(check(target, trusted / CA_CERT))
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "Hostname Verification Check failed" in str(refused.value.details())
