"""Figure 4: the gateway's overhead, ``GET /api/operations/{id}`` vs direct ``GetOperation``.

``opsctl serve operations`` and ``opsctl serve gateway`` (uvicorn) run as real
processes on a fresh MariaDB database. The subject is an HTTP/1.1 keep-alive
client (``benchmarks.http``) with a user JWT asking the gateway; the baseline
is a grpc.aio client with the gateway's own credential asking the Operations
service for the same operation. Latency: one request at a time, p50 per round. Saturation:
``CONCURRENCY`` requests in flight for a fixed time, requests per second.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from benchmarks.client import OpsClient
from benchmarks.context import Context
from benchmarks.databases import mariadb_database
from benchmarks.http import HttpGetter
from benchmarks.processes import JWT_SECRET, gateway_server, operations_server
from benchmarks.stats import Paired, interleave_async, median, percentile
from benchmarks.table import Row, Target
from durable_ops.gateway.auth import mint_user_token

USER = "bench-gateway-user"
CONCURRENCY = 16
LATENCY_TARGET = Target("<=", 2.0)
THROUGHPUT_TARGET = Target(">=", 0.5)

Call = Callable[[], Awaitable[Any]]


async def _p50(call: Call, count: int) -> float:
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - started)
    return percentile(samples, 50)


async def _saturated(call: Call, seconds: float) -> float:
    """Requests per second with ``CONCURRENCY`` callers for ``seconds``."""
    done = 0
    loop = asyncio.get_running_loop()
    stop_at = loop.time() + seconds

    async def caller() -> None:
        nonlocal done
        while loop.time() < stop_at:
            await call()
            done += 1

    started = loop.time()
    await asyncio.gather(*(caller() for _ in range(CONCURRENCY)))
    return done / (loop.time() - started)


async def _measure(ctx: Context, base_url: str, target: str) -> tuple[Paired, Paired]:
    grpc_client = OpsClient(target)
    token = mint_user_token(JWT_SECRET, USER, 3600)
    connections: asyncio.Queue[HttpGetter] = asyncio.Queue()
    for _ in range(CONCURRENCY):
        connections.put_nowait(HttpGetter(base_url, {"Authorization": f"Bearer {token}"}))
    try:
        operation = await grpc_client.create(USER, "gateway-probe")
        path = f"/api/operations/{operation.id}"

        async def via_gateway() -> None:
            connection = await connections.get()
            try:
                status, _body = await connection.get(path)
            finally:
                connections.put_nowait(connection)
            if status != 200:
                raise RuntimeError(f"gateway answered {status}")

        async def direct() -> None:
            await grpc_client.get(USER, operation.id)

        count = ctx.pick(150, 500)
        seconds = ctx.pick(2, 5)
        for call in (via_gateway, direct):  # warm-up
            await _saturated(call, 0.5)
        latency = await interleave_async(
            ctx.rounds, lambda: _p50(via_gateway, count), lambda: _p50(direct, count)
        )
        throughput = await interleave_async(
            ctx.rounds,
            lambda: _saturated(via_gateway, seconds),
            lambda: _saturated(direct, seconds),
        )
        return latency, throughput
    finally:
        await grpc_client.close()
        while not connections.empty():
            await connections.get_nowait().close()


def run(ctx: Context) -> list[Row]:
    ctx.begin_section("4 gateway overhead")
    with (
        mariadb_database() as url,
        operations_server(url) as target,
        gateway_server(target, url) as base_url,
    ):
        latency, throughput = asyncio.run(_measure(ctx, base_url, target))
    return [
        Row(
            "4",
            "GET /api/operations/{id} p50: HTTP gateway ÷ direct gRPC",
            f"{latency.subject_median * 1e3:.2f} ms",
            f"{latency.baseline_median * 1e3:.2f} ms",
            latency.ratio,
            LATENCY_TARGET,
        ),
        Row(
            "4",
            f"requests/s at saturation ({CONCURRENCY} in flight): gateway ÷ gRPC",
            f"{throughput.subject_median:.0f}/s",
            f"{throughput.baseline_median:.0f}/s",
            throughput.ratio,
            THROUGHPUT_TARGET,
            "per-round throughput ratios "
            + ", ".join(f"{r:.2f}" for r in throughput.ratios)
            + f"; p50 per-round ratios {', '.join(f'{r:.2f}' for r in latency.ratios)}"
            + f" (median p50s {median(latency.subject):.4f} s vs {median(latency.baseline):.4f} s)",
        ),
    ]
