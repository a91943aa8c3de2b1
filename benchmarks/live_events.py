"""``python -m benchmarks.live_events [--beats N] [--mariadb]``: how soon the answer so far
reaches the page (issue 39).

One Operations process and one gateway, as ``opsctl serve`` runs them. A
worker holds one lease on a HoldLeases stream and sends a longer answer on
each beat, at the worker's cadence (``worker.lease.NEWS_BEAT_SECONDS``); a
client holds ``GET /api/events`` open as the page does. The figure is the time
from a beat carrying text leaving the worker to the gateway's event with that
text arriving at the client, p50 and p95 (the issue's target: p95 ≤ 250 ms),
and the draft writes a second per streaming operation that cadence costs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

import httpx

from benchmarks.client import OpsClient
from benchmarks.databases import mariadb_database, sqlite_database
from benchmarks.processes import JWT_SECRET, caller, gateway_server, operations_server
from benchmarks.stats import median, percentile
from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.gateway.auth import mint_user_token
from durable_ops.model.scope import Role
from durable_ops.worker.lease import NEWS_BEAT_SECONDS

OWNER = "bench-live"
TIMEOUT_SECONDS = 10.0


@contextmanager
def _database(mariadb: bool) -> Iterator[str]:
    with mariadb_database() if mariadb else sqlite_database() as url:
        yield url


async def _events(response: httpx.Response) -> AsyncIterator[dict[str, object]]:
    """The stream's operation events, parsed."""
    name = ""
    async for line in response.aiter_lines():
        if line.startswith("event: "):
            name = line.removeprefix("event: ")
        elif line.startswith("data: ") and name == "operation":
            yield json.loads(line.removeprefix("data: "))


async def measure(operations: str, gateway: str, beats: int) -> list[float]:
    client = OpsClient(operations)
    requests: asyncio.Queue[pb.HoldLeasesRequest] = asyncio.Queue()

    async def outgoing() -> AsyncIterator[pb.HoldLeasesRequest]:
        while True:
            yield await requests.get()

    try:
        await client.create(OWNER, "live-events", task_type="strategy.snapshot")
        claimed = await client.claim("strategy.snapshot")
        assert claimed is not None
        lease = client.stub.HoldLeases(outgoing(), metadata=caller(Role.WORKER).metadata())
        headers = {"Authorization": f"Bearer {mint_user_token(JWT_SECRET, OWNER, 600)}"}
        latencies: list[float] = []
        async with (
            httpx.AsyncClient(base_url=gateway, timeout=TIMEOUT_SECONDS) as http,
            http.stream("GET", "/api/events", headers=headers) as response,
        ):
            events = _events(response)
            entry = pb.HeldLease(
                operation_id=claimed.operation_id,
                owner_id=claimed.owner_id,
                lease_token=claimed.lease_token,
            )
            for n in range(beats):
                text = json.dumps({"summary": "word " * n + f"n{n}"})[:-2]  # an open string
                entry.answer_text = text
                sent = time.perf_counter()
                await requests.put(pb.HoldLeasesRequest(leases=[entry]))
                entry = pb.HeldLease(operation_id=claimed.operation_id)
                await lease.read()
                async with asyncio.timeout(TIMEOUT_SECONDS):
                    async for event in events:
                        draft = event.get("draft")
                        partial = draft.get("partial") if isinstance(draft, dict) else None
                        if isinstance(partial, dict) and str(partial.get("summary", "")).endswith(
                            f"n{n}"
                        ):
                            break
                latencies.append(time.perf_counter() - sent)
                await asyncio.sleep(NEWS_BEAT_SECONDS)
        lease.cancel()
        return latencies
    finally:
        await client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--beats", type=int, default=200)
    parser.add_argument("--mariadb", action="store_true", help="MariaDB instead of SQLite")
    options = parser.parse_args()
    with (
        _database(options.mariadb) as url,
        operations_server(url) as operations,
        gateway_server(operations, url) as gateway,
    ):
        latencies = asyncio.run(measure(operations, gateway, options.beats))
    engine = "MariaDB" if options.mariadb else "SQLite"
    ms = [value * 1000 for value in latencies]
    print(
        f"{engine}: beat with text -> /api/events, {len(ms)} beats: "
        f"p50 {median(ms):.1f} ms, p95 {percentile(ms, 95):.1f} ms, max {max(ms):.1f} ms; "
        f"draft writes per streaming operation at most {1 / NEWS_BEAT_SECONDS:g}/s"
    )


if __name__ == "__main__":
    main()
