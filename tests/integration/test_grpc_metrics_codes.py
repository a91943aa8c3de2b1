"""The code a gRPC call is counted under when the server never answered it.

A call whose deadline passed while the server still worked on it (a SQLite write
waiting 30 s for a lock behind a gateway that waits less) is cancelled by gRPC on
the server's side. Counted ``CANCELLED``, it read as a client that went away and no
alert on server errors saw it; it is the server being too slow: ``DEADLINE_EXCEEDED``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest
from prometheus_client import CollectorRegistry

from durable_ops.rpc.metrics import GrpcServerMetrics, MetricsInterceptor

METHOD = "/test.Slow/Wait"


def _counted(registry: CollectorRegistry, code: str) -> float:
    value = registry.get_sample_value(
        "durable_ops_grpc_server_requests_total", {"method": METHOD, "code": code}
    )
    return value or 0.0


def test_a_call_past_its_deadline_counts_deadline_exceeded_and_a_dropped_one_cancelled() -> None:
    async def scenario() -> None:
        registry = CollectorRegistry()
        never = asyncio.Event()
        entered = asyncio.Event()
        ended = asyncio.Event()

        async def wait(request: bytes, context: Any) -> bytes:
            entered.set()
            try:
                await never.wait()  # a handler that never answers on its own
            finally:
                ended.set()
            return b""

        handler: Any = grpc.unary_unary_rpc_method_handler(wait)
        server = grpc.aio.server(interceptors=(MetricsInterceptor(GrpcServerMetrics(registry)),))
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("test.Slow", {"Wait": handler}),)
        )
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                call: Any = channel.unary_unary(METHOD)
                with pytest.raises(grpc.aio.AioRpcError) as raised:
                    await call(b"", timeout=0.3)
                assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
                await ended.wait()
                await asyncio.sleep(0)  # the interceptor counts in the handler's finally
                assert _counted(registry, "DEADLINE_EXCEEDED") == 1
                assert _counted(registry, "CANCELLED") == 0

                entered.clear()
                ended.clear()
                dropped = call(b"")  # no deadline: the client gives up itself
                await entered.wait()
                dropped.cancel()
                await ended.wait()
                await asyncio.sleep(0)
                assert _counted(registry, "CANCELLED") == 1
                assert _counted(registry, "DEADLINE_EXCEEDED") == 1
        finally:
            await server.stop(None)

    asyncio.run(scenario())
