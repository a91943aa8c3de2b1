"""A real grpc.aio server on loopback, with a raw-bytes service and no project proto."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from durable_ops.model.errors import CapacityExceeded
from durable_ops.model.scope import NeutralScope, OwnerScope, Role, Scope
from durable_ops.rpc.client import ServiceCaller, open_channel
from durable_ops.rpc.errors import domain_error_from_rpc
from durable_ops.rpc.scope import caller_scope
from durable_ops.rpc.server import build_server, serve, start
from tests.support.forged import claims, signed, untrusted_key
from tests.support.keys import signing_key, trusted

SERVICE = "test.Probe"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def _describe(scope: Scope) -> bytes:
    if isinstance(scope, OwnerScope):
        return json.dumps({"role": scope.role.value, "owner": scope.owner_id}).encode()
    assert isinstance(scope, NeutralScope)
    return json.dumps({"role": scope.role.value, "neutral": True}).encode()


class Probe:
    """Handlers over raw bytes; ``calls`` proves whether a rejected call ever reached one."""

    def __init__(self) -> None:
        self.calls = 0

    async def Whoami(self, request: bytes, context: Any) -> bytes:
        self.calls += 1
        return _describe(caller_scope(context))

    async def Busy(self, request: bytes, context: Any) -> bytes:
        raise CapacityExceeded("too many active operations", retry_after_seconds=30)

    async def Slow(self, request: bytes, context: Any) -> bytes:
        await asyncio.sleep(0.5)
        return b"done"

    async def Chat(self, requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
        async for request in requests:
            self.calls += 1
            yield request + b" " + _describe(caller_scope(context))

    async def Echo(self, request: health_pb2.HealthCheckRequest, context: Any) -> bytes:
        self.calls += 1
        service: str = request.service
        return service.encode()

    async def EchoAll(
        self, requests: AsyncIterator[health_pb2.HealthCheckRequest], context: Any
    ) -> AsyncIterator[bytes]:
        async for request in requests:
            self.calls += 1
            service: str = request.service
            yield service.encode()

    def register(self, server: Any) -> None:
        handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
            name: grpc.unary_unary_rpc_method_handler(getattr(self, name))
            for name in ("Whoami", "Busy", "Slow")
        }
        handlers["Chat"] = grpc.stream_stream_rpc_method_handler(self.Chat)
        parse = health_pb2.HealthCheckRequest.FromString  # a message with a string field
        handlers["Echo"] = grpc.unary_unary_rpc_method_handler(
            self.Echo, request_deserializer=parse
        )
        handlers["EchoAll"] = grpc.stream_stream_rpc_method_handler(
            self.EchoAll, request_deserializer=parse
        )
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))


@asynccontextmanager
async def running(probe: Probe) -> AsyncIterator[grpc.aio.Channel]:
    server, port = build_server("127.0.0.1:0", probe.register, [SERVICE], trusted=trusted())
    await start(server)
    try:
        async with open_channel(f"127.0.0.1:{port}", None) as channel:
            yield channel
    finally:
        await server.stop(None)


def _unary(channel: Any, method: str) -> Any:
    return channel.unary_unary(f"/{SERVICE}/{method}")


def run(scenario: Callable[[Probe, Any], Awaitable[None]]) -> Probe:
    probe = Probe()

    async def main() -> None:
        async with running(probe) as channel:
            await scenario(probe, channel)

    asyncio.run(main())
    return probe


async def _status_of(call: Awaitable[Any]) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await call
    return failure.value


def _trailers(error: grpc.aio.AioRpcError) -> dict[str, str]:
    return dict(error.trailing_metadata() or ())


def test_a_gateway_with_x_owner_id_gets_an_owner_scope() -> None:
    async def scenario(probe: Probe, channel: Any) -> None:
        metadata = ServiceCaller(signing_key(Role.GATEWAY)).metadata("alice")
        answer = await _unary(channel, "Whoami")(b"", metadata=metadata)
        assert json.loads(answer) == {"role": "gateway", "owner": "alice"}

    run(scenario)


@pytest.mark.parametrize(
    "metadata",
    [
        pytest.param((), id="no-credential"),
        pytest.param(
            ServiceCaller(untrusted_key(Role.GATEWAY)).metadata("alice"), id="untrusted-key"
        ),
        pytest.param(
            (
                (
                    "authorization",
                    "Bearer "
                    + base64.urlsafe_b64encode(b'{"alg":"none","typ":"JWT"}').decode().rstrip("=")
                    + "."
                    + base64.urlsafe_b64encode(
                        json.dumps(
                            {
                                "role": "gateway",
                                "iss": "durable-ops",
                                "iat": int(time.time()),
                                "exp": int(time.time()) + 300,
                            }
                        ).encode()
                    )
                    .decode()
                    .rstrip("=")
                    + ".",
                ),
                ("x-owner-id", "alice"),
            ),
            id="alg-none",
        ),
    ],
)
def test_calls_without_a_valid_credential_never_reach_the_handler(
    metadata: tuple[tuple[str, str], ...],
) -> None:
    async def scenario(probe: Probe, channel: Any) -> None:
        error = await _status_of(_unary(channel, "Whoami")(b"", metadata=metadata))
        assert error.code() == grpc.StatusCode.UNAUTHENTICATED
        # No request is written: a write racing the server's refusal makes grpc's aio
        # client report INTERNAL instead of the server's status (grpc/grpc#36066).
        chat = channel.stream_stream(f"/{SERVICE}/Chat")(metadata=metadata)
        error = await _status_of(chat.read())
        assert error.code() == grpc.StatusCode.UNAUTHENTICATED
        assert _trailers(error)["x-error-code"] in {
            "service_credential_required",
            "invalid_service_credential",
        }

    assert run(scenario).calls == 0


def test_a_call_without_a_credential_is_refused_before_its_request_arrives() -> None:
    """grpc.aio reads a unary request whole before its handler runs: a caller with no key
    held calls open by never finishing its message (an outside test pinned 1.6 GB of the
    server's memory with 400 such calls on one connection)."""

    async def never_finished() -> AsyncIterator[bytes]:
        await asyncio.Event().wait()
        yield b""

    async def scenario(probe: Probe, channel: Any) -> None:
        call = channel.stream_unary(f"/{SERVICE}/Whoami")(never_finished())
        error = await _status_of(asyncio.wait_for(call, 5))
        assert error.code() == grpc.StatusCode.UNAUTHENTICATED

    assert run(scenario).calls == 0


def _signed_credential(issued_ago: int, lifetime: int) -> tuple[tuple[str, str], ...]:
    iat = int(time.time()) - issued_ago
    token = signed(signing_key(Role.GATEWAY), claims(iat=iat, exp=iat + lifetime))
    return (("authorization", f"Bearer {token}"), ("x-owner-id", "alice"))


DAY = 24 * 3600


@pytest.mark.parametrize(
    ("issued_ago", "lifetime"),
    [
        pytest.param(DAY + 600, DAY + 1200, id="issued-a-day-ago-unexpired"),
        pytest.param(0, 7 * DAY, id="minted-for-a-week"),
    ],
)
def test_a_credential_past_the_maximum_lifetime_never_reaches_the_handler(
    issued_ago: int, lifetime: int
) -> None:
    """Correctly signed and unexpired, but older or longer-lived than 24 h: UNAUTHENTICATED."""

    async def scenario(probe: Probe, channel: Any) -> None:
        metadata = _signed_credential(issued_ago, lifetime)
        error = await _status_of(_unary(channel, "Whoami")(b"", metadata=metadata))
        assert error.code() == grpc.StatusCode.UNAUTHENTICATED
        assert _trailers(error)["x-error-code"] == "invalid_service_credential"
        # Within the bound, the same kind of credential is fine.
        fresh = _signed_credential(DAY - 600, DAY)
        answer = await _unary(channel, "Whoami")(b"", metadata=fresh)
        assert json.loads(answer) == {"role": "gateway", "owner": "alice"}

    assert run(scenario).calls == 1


def test_a_gateway_without_x_owner_id_is_denied_by_caller_scope() -> None:
    async def scenario(probe: Probe, channel: Any) -> None:
        metadata = ServiceCaller(signing_key(Role.GATEWAY)).metadata()
        error = await _status_of(_unary(channel, "Whoami")(b"", metadata=metadata))
        assert error.code() == grpc.StatusCode.PERMISSION_DENIED
        assert _trailers(error)["x-error-code"] == "owner_scope_required"

    # The credential passed the interceptor: the denial came from caller_scope.
    assert run(scenario).calls == 1


def test_a_worker_without_x_owner_id_is_neutral() -> None:
    async def scenario(probe: Probe, channel: Any) -> None:
        metadata = ServiceCaller(signing_key(Role.WORKER)).metadata()
        answer = await _unary(channel, "Whoami")(b"", metadata=metadata)
        assert json.loads(answer) == {"role": "worker", "neutral": True}

    run(scenario)


def test_a_duplicate_x_owner_id_is_refused() -> None:
    async def scenario(probe: Probe, channel: Any) -> None:
        metadata = (
            *ServiceCaller(signing_key(Role.WORKER)).metadata("alice"),
            ("x-owner-id", "bob"),
        )
        error = await _status_of(_unary(channel, "Whoami")(b"", metadata=metadata))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert _trailers(error)["x-error-field"] == "x-owner-id"

    run(scenario)


def test_the_role_reaches_stream_handlers_too() -> None:
    async def scenario(probe: Probe, channel: Any) -> None:
        metadata = ServiceCaller(signing_key(Role.WORKER)).metadata("carol")
        chat = channel.stream_stream(f"/{SERVICE}/Chat")(iter([b"a", b"b"]), metadata=metadata)
        answers = [answer async for answer in chat]
        scope = b'{"role": "worker", "owner": "carol"}'
        assert answers == [b"a " + scope, b"b " + scope]

    run(scenario)


NOT_A_MESSAGE = b"\xff\xff\xff"  # a field header with no end
NOT_UTF_8 = b"\x0a\x03a\xc3\x28"  # field 1, a string, three bytes that are no UTF-8


@pytest.mark.parametrize("raw", [NOT_A_MESSAGE, NOT_UTF_8], ids=["garbage", "not-utf-8"])
def test_a_request_that_does_not_decode_is_refused_after_the_credential_check(
    raw: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    """UNAUTHENTICATED without a credential, INVALID_ARGUMENT with one; never UNKNOWN,
    and nothing logged as an error (an anonymous client could fill the log)."""

    async def scenario(probe: Probe, channel: Any) -> None:
        echo = _unary(channel, "Echo")
        assert (
            await echo(b"\x0a\x02ok", metadata=ServiceCaller(signing_key(Role.GATEWAY)).metadata())
            == b"ok"
        )
        error = await _status_of(echo(raw))
        assert error.code() == grpc.StatusCode.UNAUTHENTICATED
        metadata = ServiceCaller(signing_key(Role.GATEWAY)).metadata()
        error = await _status_of(echo(raw, metadata=metadata))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert _trailers(error)["x-error-code"] == "malformed_request"
        chat = channel.stream_stream(f"/{SERVICE}/EchoAll")(metadata=metadata)
        await chat.write(b"\x0a\x05first")
        assert await chat.read() == b"first"
        await chat.write(raw)
        error = await _status_of(chat.read())
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert _trailers(error)["x-error-code"] == "malformed_request"

    with caplog.at_level("ERROR"):
        assert run(scenario).calls == 2  # the two good requests, nothing else
    assert [record.getMessage() for record in caplog.records if record.levelname == "ERROR"] == []


def test_health_answers_serving_without_a_credential() -> None:
    async def scenario(probe: Probe, channel: Any) -> None:
        stub = health_pb2_grpc.HealthStub(channel)
        for service in ("", SERVICE):
            reply = await stub.Check(health_pb2.HealthCheckRequest(service=service))
            assert reply.status == SERVING

    run(scenario)


def test_reflection_lists_the_services_only_to_a_caller_with_a_credential() -> None:
    async def scenario(probe: Probe, channel: Any) -> None:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        # No request written: see the Chat call above (grpc/grpc#36066).
        error = await _status_of(stub.ServerReflectionInfo().read())
        assert error.code() == grpc.StatusCode.UNAUTHENTICATED
        assert _trailers(error)["x-error-code"] == "service_credential_required"
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        metadata = ServiceCaller(signing_key(Role.WORKER)).metadata()
        listing = stub.ServerReflectionInfo(iter([request]), metadata=metadata)
        replies = [reply async for reply in listing]
        names = {s.name for s in replies[0].list_services_response.service}
        assert names == {
            SERVICE,
            "grpc.health.v1.Health",
            "grpc.reflection.v1alpha.ServerReflection",
        }

    run(scenario)


def test_a_domain_error_comes_back_with_its_status_and_code() -> None:
    async def scenario(probe: Probe, channel: Any) -> None:
        metadata = ServiceCaller(signing_key(Role.GATEWAY)).metadata("alice")
        error = await _status_of(_unary(channel, "Busy")(b"", metadata=metadata))
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert _trailers(error)["x-error-code"] == "capacity_exceeded"
        assert _trailers(error)["x-retry-after"] == "30"
        rebuilt = domain_error_from_rpc(error)
        assert isinstance(rebuilt, CapacityExceeded)
        assert rebuilt.retry_after_seconds == 30

    run(scenario)


def test_sigterm_drains_health_finishes_calls_in_flight_and_stops() -> None:
    stopped: list[bool] = []

    async def on_stop() -> None:
        stopped.append(True)

    async def main() -> None:
        probe = Probe()
        server, port = build_server("127.0.0.1:0", probe.register, [SERVICE], trusted=trusted())
        # A grace far longer than the wait below: a stop that waited it out fails the test.
        serving = asyncio.create_task(serve(server, grace=120.0, on_stop=on_stop))
        metadata = ServiceCaller(signing_key(Role.WORKER)).metadata()
        async with open_channel(f"127.0.0.1:{port}", None) as channel:
            watch = health_pb2_grpc.HealthStub(channel).Watch(
                health_pb2.HealthCheckRequest(service=SERVICE), wait_for_ready=True
            )
            assert (await watch.read()).status == SERVING
            slow = asyncio.ensure_future(_unary(channel, "Slow")(b"", metadata=metadata))
            await asyncio.sleep(0.1)  # the call is in flight

            os.kill(os.getpid(), signal.SIGTERM)
            assert (await watch.read()).status == NOT_SERVING
            watch.cancel()  # else stop() would wait out the whole grace period for it
            assert await slow == b"done"
            await asyncio.wait_for(serving, timeout=30)  # graceful, not the whole grace
            assert stopped == [True]
            error = await _status_of(_unary(channel, "Whoami")(b"", metadata=metadata))
            assert error.code() == grpc.StatusCode.UNAVAILABLE

    asyncio.run(main())


def test_cancelling_serve_stops_the_server_and_runs_on_stop() -> None:
    stopped: list[bool] = []

    async def on_stop() -> None:
        stopped.append(True)

    async def main() -> None:
        server, port = build_server("127.0.0.1:0", Probe().register, [SERVICE], trusted=trusted())
        serving = asyncio.create_task(serve(server, grace=0.5, on_stop=on_stop))
        async with open_channel(f"127.0.0.1:{port}", None) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            await stub.Check(health_pb2.HealthCheckRequest(), wait_for_ready=True)
            serving.cancel()
            with pytest.raises(asyncio.CancelledError):
                await serving
            error = await _status_of(stub.Check(health_pb2.HealthCheckRequest(), timeout=1))
            assert error.code() == grpc.StatusCode.UNAVAILABLE
        assert stopped == [True]

    asyncio.run(main())
