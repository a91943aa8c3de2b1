"""A lease-fenced write is asked again while the service answers UNAVAILABLE, and only then.

A replica killed between the worker's last beat and its completion (or the AI
worker's note) must not cost the attempt: the call is repeated (the lease
holder's repeat answers what the first did) until an answer or the bound.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.model.errors import LeaseLost, Unavailable
from durable_ops.worker import completer


def _rpc_error(code: grpc.StatusCode) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), "away")


class _Flaky:
    """Answers ``failures`` errors, then the state."""

    def __init__(self, failures: list[grpc.StatusCode]) -> None:
        self._failures = list(failures)
        self.calls = 0

    async def __call__(self) -> Any:
        self.calls += 1
        if self._failures:
            raise _rpc_error(self._failures.pop(0))
        return pb.LeaseMutationResponse(state=pb.OPERATION_STATE_SUCCEEDED)


def _retried(method: _Flaky) -> Any:
    return asyncio.run(completer.retrying(method))


def test_unavailable_answers_are_asked_again_until_one_lands() -> None:
    flaky = _Flaky([grpc.StatusCode.UNAVAILABLE] * 3)
    assert _retried(flaky).state == pb.OPERATION_STATE_SUCCEEDED
    assert flaky.calls == 4


def test_any_other_refusal_is_final_at_once() -> None:
    flaky = _Flaky([grpc.StatusCode.ABORTED])
    with pytest.raises(LeaseLost):
        _retried(flaky)
    assert flaky.calls == 1


def test_past_the_bound_the_last_unavailable_is_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(completer, "RETRY_SECONDS", 0.3)
    flaky = _Flaky([grpc.StatusCode.UNAVAILABLE] * 1000)
    with pytest.raises(Unavailable):
        _retried(flaky)
    assert 2 <= flaky.calls < 20


def test_once_the_worker_stops_unavailable_is_final_at_once() -> None:
    """What a stopping worker settles goes once: the service may be stopping with it."""
    flaky = _Flaky([grpc.StatusCode.UNAVAILABLE] * 1000)

    async def stopped_first() -> Any:
        stopping = asyncio.Event()
        stopping.set()
        return await completer.retrying(flaky, stopping=stopping)

    with pytest.raises(Unavailable):
        asyncio.run(stopped_first())
    assert flaky.calls == 1


def test_a_stop_ends_the_pause_in_one_last_ask() -> None:
    flaky = _Flaky([grpc.StatusCode.UNAVAILABLE] * 1000)
    asked_at_stop: list[int] = []

    async def stopped_while_asking_again() -> Any:
        stopping = asyncio.Event()
        asking = asyncio.create_task(completer.retrying(flaky, stopping=stopping))
        while flaky.calls < 2:  # asked again: pausing before the next ask
            await asyncio.sleep(0.005)
        asked_at_stop.append(flaky.calls)
        stopping.set()
        return await asking

    with pytest.raises(Unavailable):
        asyncio.run(asyncio.wait_for(stopped_while_asking_again(), 5.0))
    assert flaky.calls == asked_at_stop[0] + 1
