"""Run an SDK worker in a test until a condition holds, then stop it and wait for its end."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from durable_ops.worker import Worker

T = TypeVar("T")
HANG_GUARD = 30.0


def run_until(worker: Worker, until: Callable[[], Awaitable[T]]) -> T:
    """Run ``worker`` until ``until`` is done, then stop it and wait for it to end."""

    async def both() -> T:
        running = asyncio.create_task(worker.run())
        try:
            async with asyncio.timeout(HANG_GUARD):
                return await until()
        finally:
            worker.stop()
            async with asyncio.timeout(HANG_GUARD):
                await running

    return asyncio.run(both())
