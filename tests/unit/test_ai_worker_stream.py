"""The worker's lease stream leaves no loose error behind a beat it gave up on.

A beat that timed out (or whose write failed) leaves its answer waiting; when
the stream then breaks, that answer must not carry an exception nobody reads
("Future exception was never retrieved" in the worker's log).
"""

from __future__ import annotations

import asyncio
import gc
from typing import Any, cast

import grpc
import pytest

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.worker.lease import HoldLeasesCall, StreamBroken, _Call


class _StuckThenEndingCall:
    """A write that never completes (flow control of a dead peer); ``end`` ends the stream."""

    def __init__(self) -> None:
        self._ended = asyncio.Event()

    async def write(self, request: pb.HoldLeasesRequest) -> None:
        await asyncio.Event().wait()

    async def read(self) -> Any:
        await self._ended.wait()
        return grpc.aio.EOF

    def end(self) -> None:
        self._ended.set()

    async def done_writing(self) -> None:
        return None

    def cancel(self) -> bool:
        return True


def test_a_beat_given_up_on_leaves_no_loose_error_when_the_stream_breaks() -> None:
    loose: list[dict[str, Any]] = []

    async def scenario() -> None:
        asyncio.get_running_loop().set_exception_handler(
            lambda _loop, context: loose.append(context)
        )
        call = _StuckThenEndingCall()
        stream = _Call(cast(HoldLeasesCall, call), on_pushed=lambda _outcomes: None)
        with pytest.raises(StreamBroken, match="in time"):
            await stream.beat(pb.HoldLeasesRequest(), timeout=0.05)
        call.end()
        await asyncio.sleep(0.05)  # the reader sees the end and fails what waits
        with pytest.raises(StreamBroken):
            await stream.beat(pb.HoldLeasesRequest(), timeout=0.05)
        await stream.close()
        gc.collect()  # a future with an unread exception reports it when collected

    asyncio.run(scenario())
    assert loose == []
