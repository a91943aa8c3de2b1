"""One gRPC replica as the product builds it (``rpc.server``), run in a process of its own so
a test can start it inside a network namespace: ``python -m tests.support.tls_replica BIND
KEYS_DIR NAME``.

A bind beyond loopback makes it serve TLS only, with the certificate in ``KEYS_DIR``.
``NAME`` is listed by its reflection service (to a caller with a service credential) as
the only service besides health and reflection, so a client sees which replica answered.
It serves until SIGTERM.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from durable_ops.rpc.keys import TrustedKeys
from durable_ops.rpc.server import build_server, serve


async def main(bind: str, keys_dir: Path, name: str) -> None:
    server, _port = build_server(bind, lambda _server: None, [name], trusted=TrustedKeys(keys_dir))
    await serve(server, grace=0.2)


if __name__ == "__main__":
    bind, keys_dir, name = sys.argv[1:]
    asyncio.run(main(bind, Path(keys_dir), name))
