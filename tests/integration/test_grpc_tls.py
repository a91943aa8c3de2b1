"""gRPC beyond loopback is TLS only (SPEC §2, issue 35): a real server on a wildcard bind
refuses plaintext, answers TLS trusting the local authority, and `opsctl up` keeps its
gRPC services on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from durable_ops.rpc.credentials import mint_service_token
from durable_ops.rpc.keys import SigningKey, TrustedKeys, ensure_role_keys, private_key_path
from durable_ops.rpc.server import build_server, start, stop
from durable_ops.rpc.tls import CA_CERT, channel_credentials, ensure_tls, server_credentials
from durable_ops.settings import Settings, SettingsError
from durable_ops.stack.binds import stack_binds
from durable_ops.stack.preflight import problems
from tests.integration.test_compose import _healthcheck
from tests.support.grpc_services import BackgroundLoop
from tests.support.ports import free_port


@pytest.fixture
def keys(tmp_path: Path) -> Path:
    ensure_role_keys(tmp_path)
    ensure_tls(tmp_path)
    return tmp_path


@pytest.fixture
def wildcard_server(keys: Path) -> Iterator[int]:
    """A server bound on every interface (so TLS only); the test dials only 127.0.0.1."""
    loop = BackgroundLoop()
    port = free_port()

    async def boot() -> grpc.aio.Server:
        server, _ = build_server(f"0.0.0.0:{port}", lambda _s: None, [], trusted=TrustedKeys(keys))
        await start(server)
        return server

    server = loop.call(boot())
    try:
        yield port
    finally:
        loop.call(stop(server, 0.2))
        loop.close()


def _health(channel: grpc.Channel) -> int:
    request = health_pb2.HealthCheckRequest(service="")
    status: int = health_pb2_grpc.HealthStub(channel).Check(request, timeout=3).status
    return status


def test_a_plaintext_call_to_a_bind_beyond_loopback_is_refused(wildcard_server: int) -> None:
    plaintext = grpc.insecure_channel(f"127.0.0.1:{wildcard_server}")
    with plaintext, pytest.raises(grpc.RpcError) as refused:
        _health(plaintext)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


def test_tls_trusting_the_local_authority_is_served(keys: Path, wildcard_server: int) -> None:
    credentials = grpc.ssl_channel_credentials((keys / CA_CERT).read_bytes())
    with grpc.secure_channel(f"127.0.0.1:{wildcard_server}", credentials) as channel:
        assert _health(channel) == health_pb2.HealthCheckResponse.SERVING
        # Reflection answers an authenticated caller (and only one: test_rpc_server).
        token = mint_service_token(SigningKey.load(private_key_path(keys, "operator")))
        reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
        answers = reflection.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
            metadata=(("authorization", f"Bearer {token}"),),
            timeout=3,
        )
        assert next(iter(answers)).list_services_response.service


def test_the_container_health_check_speaks_tls_with_the_authority(
    keys: Path, wildcard_server: int
) -> None:
    target = f"127.0.0.1:{wildcard_server}"
    assert _healthcheck("grpc", target, "--ca", str(keys / CA_CERT)).returncode == 0
    plaintext = _healthcheck("grpc", target)
    assert plaintext.returncode == 1
    assert "UNAVAILABLE" in plaintext.stderr


def test_another_authority_is_not_trusted(tmp_path: Path, wildcard_server: int) -> None:
    ensure_tls(tmp_path / "other")
    stranger = grpc.ssl_channel_credentials((tmp_path / "other" / CA_CERT).read_bytes())
    channel = grpc.secure_channel(f"127.0.0.1:{wildcard_server}", stranger)
    with channel, pytest.raises(grpc.RpcError) as refused:
        _health(channel)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


def test_a_bind_beyond_loopback_without_a_certificate_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="opsctl keys init"):
        server_credentials(tmp_path, "0.0.0.0:50051")
    assert server_credentials(tmp_path, "127.0.0.1:50051") is None
    assert server_credentials(tmp_path, "[::1]:50051") is None


@pytest.mark.parametrize(
    ("target", "tls"),
    [
        ("127.0.0.1:50051", False),
        ("localhost:50051", False),
        ("[::1]:50051", False),
        ("ipv4:127.0.0.1:50051,127.0.0.2:50051", False),
        ("operations:50051", True),
        ("10.0.0.5:50051", True),
        ("ipv4:127.0.0.1:50051,10.0.0.6:50051", True),  # one address beyond: TLS to all
        ("dns:///ops.example.com:443", True),
    ],
)
def test_a_client_speaks_tls_to_any_target_beyond_loopback(
    keys: Path, target: str, tls: bool
) -> None:
    assert (channel_credentials(target, keys / CA_CERT) is not None) is tls


def test_opsctl_up_keeps_the_grpc_services_on_loopback() -> None:
    settings = Settings(operations_bind="0.0.0.0:50051", gateway_bind="0.0.0.0:8080")
    found = problems(stack_binds(settings))
    assert any("OPS_OPERATIONS_BIND" in problem and "TLS" in problem for problem in found)
    assert not any("OPS_GATEWAY_BIND" in problem for problem in found)


def test_ensure_tls_keeps_what_it_made(keys: Path) -> None:
    before = (keys / "tls" / "server.pem").read_bytes()
    assert ensure_tls(keys) is False
    assert (keys / "tls" / "server.pem").read_bytes() == before
