"""At start-up, how many answers the local model server computes at once (its slots).

Read only when ``OPS_WORKER_CONCURRENCY`` is 0 (``model.concurrency``: follow the
server's slot count): llama-server's ``GET /props`` ``total_slots`` (its
``--parallel``), else the length of its ``GET /slots``; both at the server's root,
beside the OpenAI-compatible ``/v1``. Any other answer (another server, a server not
up yet, a refused connection) is None, and the worker runs one inference at a time.
"""

from __future__ import annotations

import httpx

from durable_ops.model.concurrency import slots_from_props, slots_from_slots

READ_TIMEOUT_SECONDS = 3.0  # one short look at start-up; the fallback is one at a time


def server_root(local_url: str) -> str:
    """``http://host:8081/v1`` → ``http://host:8081``: where llama-server serves ``/props``."""
    root = local_url.rstrip("/")
    return root.removesuffix("/v1")


async def read_server_slots(
    local_url: str, *, timeout_seconds: float = READ_TIMEOUT_SECONDS
) -> int | None:
    """The local server's slot count, or None when it does not say it."""
    async with httpx.AsyncClient(base_url=server_root(local_url), timeout=timeout_seconds) as http:
        for path, read in (("/props", slots_from_props), ("/slots", slots_from_slots)):
            try:
                response = await http.get(path)
                found = read(response.json()) if response.status_code == 200 else None
            except (httpx.HTTPError, ValueError):
                found = None
            if found is not None:
                return found
    return None
