"""``python -m benchmarks.idle_streams BASE_URL OWNERS PER_OWNER``: hold idle event streams.

Opens ``OWNERS`` x ``PER_OWNER`` ``GET /api/events`` streams on the gateway at
``BASE_URL`` (owner ``bench-idle-<n>``, a user token minted with
``OPS_JWT_SECRET``), prints ``open N`` once every stream has answered 200,
then reads what they carry until its standard input closes; for each line it
reads there it prints ``received K keepalives U unread B bytes``, the counts
so far of all streams together. A
process of its own, so its clients' CPU is neither the gateway's nor the
measuring client's. Plain sockets: a thousand httpx clients would cost more
than what they measure.
"""

from __future__ import annotations

import asyncio
import os
import sys
from urllib.parse import urlsplit

from durable_ops.gateway.auth import mint_user_token

OPEN_AT_ONCE = 50  # connections opening together: a burst, not a thousand at once
TOKEN_SECONDS = 3600


async def _open(
    host: str, port: int, token: str
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """One stream, its status read; the writer is kept: a dropped one closes the socket."""
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(
        f"GET /api/events HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: text/event-stream\r\n"
        f"Authorization: Bearer {token}\r\n\r\n".encode()
    )
    status = await reader.readline()
    if b" 200 " not in status:
        raise RuntimeError(f"the event stream answered {status!r}")
    return reader, writer


class _Received:
    def __init__(self) -> None:
        self.keepalives = 0
        self.unread = 0
        self.bytes = 0

    async def drain(self, reader: asyncio.StreamReader) -> None:
        while line := await reader.readline():
            self.bytes += len(line)
            if line.startswith(b": keepalive"):
                self.keepalives += 1
            elif line.startswith(b"event: unread"):
                self.unread += 1


async def hold(base: str, owners: int, per_owner: int) -> None:
    parts = urlsplit(base)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    secret = os.environ["OPS_JWT_SECRET"]
    tokens = [
        mint_user_token(secret, f"bench-idle-{n}", TOKEN_SECONDS)
        for n in range(owners)
        for _ in range(per_owner)
    ]
    gate = asyncio.Semaphore(OPEN_AT_ONCE)

    async def one(token: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        async with gate:
            return await _open(host, port, token)

    streams = await asyncio.gather(*(one(token) for token in tokens))
    received = _Received()
    drains = [asyncio.ensure_future(received.drain(reader)) for reader, _ in streams]
    print(f"open {len(streams)}", flush=True)
    loop = asyncio.get_running_loop()
    while await loop.run_in_executor(None, sys.stdin.readline):
        print(
            f"received {received.keepalives} keepalives {received.unread} unread"
            f" {received.bytes} bytes",
            flush=True,
        )
    for drain in drains:
        drain.cancel()
    for _, writer in streams:
        writer.close()


def main() -> None:
    base, owners, per_owner = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    asyncio.run(hold(base, owners, per_owner))


if __name__ == "__main__":
    main()
