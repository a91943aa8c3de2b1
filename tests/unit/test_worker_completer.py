"""The worker's completer batches settlements without a timer, against a scripted call.

What ends in one turn of the event loop goes in one call; what ends while a
call is in flight waits for it and goes in the next, a full batch at once. Once
the worker stops, a service that cannot take a settlement is not asked again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine, Sequence
from typing import Any

import grpc
import pytest
from prometheus_client import REGISTRY

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.model.provenance import Provenance
from durable_ops.model.usage import Usage
from durable_ops.worker import (
    Attempt,
    Completed,
    Ending,
    PermanentFailure,
    WorkerShutdown,
)
from durable_ops.worker import completer as completer_module
from durable_ops.worker.completer import Completer, Item
from durable_ops.worker.lease import HoldLeasesCall, LeaseStream
from tests.support.claimed import a_claim

GUARD = 5.0
REFUSED = 10  # ABORTED


def _attempt(operation_id: str) -> Attempt:
    claimed = a_claim(operation_id)
    return Attempt(claimed, LeaseStream(_no_stream), lease_seconds=30)


def _no_stream() -> HoldLeasesCall:
    raise AssertionError("settling opens no lease stream")


class Service:
    """Answers each call once ``release`` is set; refuses the operations in ``refused``."""

    def __init__(self, refused: frozenset[str] = frozenset()) -> None:
        self.calls: list[list[Item]] = []
        self.release = asyncio.Event()
        self._refused = refused

    async def send(self, items: Sequence[Item]) -> pb.LeaseMutationsResponse:
        self.calls.append(list(items))
        await self.release.wait()
        return pb.LeaseMutationsResponse(
            outcomes=[
                pb.LeaseMutationsResponse.Outcome(
                    status_code=REFUSED if _operation(item) in self._refused else 0
                )
                for item in items
            ]
        )


def _operation(item: Item) -> str:
    kind = item.WhichOneof("outcome")
    assert kind is not None
    operation_id: str = getattr(item, kind).operation_id
    return operation_id


def _run(scenario: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(scenario, GUARD))


def test_what_ends_meanwhile_goes_in_one_call_once_the_one_in_flight_returns() -> None:
    async def scenario() -> None:
        service = Service()
        completer = Completer(service.send, batch_size=10, trace_name="test")
        attempts = [_attempt(f"op-{n}") for n in range(5)]
        first = asyncio.create_task(completer.settle(attempts[0], Completed("r")))
        await asyncio.sleep(0.01)
        assert [len(call) for call in service.calls] == [1]  # alone: nothing else ended
        later = [
            asyncio.create_task(completer.settle(attempt, Completed("r")))
            for attempt in attempts[1:]
        ]
        await asyncio.sleep(0.01)
        assert [len(call) for call in service.calls] == [1]  # queued behind the call in flight
        service.release.set()
        await asyncio.gather(first, *later)
        assert [[_operation(item) for item in call] for call in service.calls] == [
            ["op-0"],
            ["op-1", "op-2", "op-3", "op-4"],
        ]
        assert completer.endings == {Ending.COMPLETED: 5}

    _run(scenario())


def test_a_full_batch_goes_at_once_and_each_settlement_gets_its_own_answer() -> None:
    async def scenario() -> None:
        service = Service(refused=frozenset({"op-2"}))
        completer = Completer(service.send, batch_size=2, trace_name="test")
        attempts = [_attempt(f"op-{n}") for n in range(5)]
        settled = [
            asyncio.create_task(completer.settle(attempt, PermanentFailure("bad_input")))
            for attempt in attempts
        ]
        await asyncio.sleep(0.01)
        assert [len(call) for call in service.calls] == [2, 2]  # the fifth waits
        service.release.set()
        await asyncio.gather(*settled)
        await completer.drain()
        assert [len(call) for call in service.calls] == [2, 2, 1]
        assert [attempt.ending for attempt in attempts] == [
            Ending.FAILED,
            Ending.FAILED,
            None,  # refused: nothing was accepted
            Ending.FAILED,
            Ending.FAILED,
        ]
        assert service.calls[0][0].fail.failure_code == "bad_input"

    _run(scenario())


def test_a_batch_that_just_fills_goes_at_once_behind_the_call_in_flight() -> None:
    async def scenario() -> None:
        service = Service()
        completer = Completer(service.send, batch_size=2, trace_name="test")
        attempts = [_attempt(f"op-{n}") for n in range(4)]
        settled = [
            asyncio.create_task(completer.settle(attempt, Completed("r"))) for attempt in attempts
        ]
        await asyncio.sleep(0.01)
        assert [len(call) for call in service.calls] == [2, 2]  # the second full: not held back
        service.release.set()
        await asyncio.gather(*settled)
        assert completer.endings == {Ending.COMPLETED: 4}

    _run(scenario())


class Gone:
    """The Operations service stopped: every call is refused UNAVAILABLE."""

    def __init__(self) -> None:
        self.calls: list[list[Item]] = []

    async def send(self, items: Sequence[Item]) -> pb.LeaseMutationsResponse:
        self.calls.append(list(items))
        raise grpc.aio.AioRpcError(
            grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), "gone"
        )


def test_a_stopping_worker_hands_back_once_and_leaves_the_rest_to_the_lease() -> None:
    """A release the stopped service cannot take is not asked again: the stop does not
    wait out ``RETRY_SECONDS`` (the lease hands the operation back instead)."""

    async def scenario() -> None:
        service = Gone()
        completer = Completer(service.send, batch_size=10, trace_name="test")
        attempt = _attempt("op-0")
        completer.stop()
        await completer.settle(attempt, WorkerShutdown())
        await completer.drain()
        assert [[_operation(item) for item in call] for call in service.calls] == [["op-0"]]
        assert attempt.ending is None  # not accepted: its lease runs out instead
        assert completer.endings == {}

    _run(scenario())


class BackAfter(Gone):
    """Stopped (UNAVAILABLE) until ``seconds`` from now, then it takes every settlement."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self._back_at = time.monotonic() + seconds

    async def send(self, items: Sequence[Item]) -> pb.LeaseMutationsResponse:
        if time.monotonic() < self._back_at:
            return await super().send(items)
        self.calls.append(list(items))
        return pb.LeaseMutationsResponse(outcomes=[self.answer(item) for item in items])

    def answer(self, item: Item) -> pb.LeaseMutationsResponse.Outcome:
        return pb.LeaseMutationsResponse.Outcome()


def test_a_settlement_is_offered_while_its_lease_may_still_hold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A service back after ``RETRY_SECONDS`` but within the lease takes the settlement:
    the work is not done again."""
    monkeypatch.setattr(completer_module, "RETRY_SECONDS", 0.2)

    async def scenario() -> None:
        service = BackAfter(seconds=0.6)
        completer = Completer(service.send, batch_size=10, trace_name="test")
        attempt = _attempt("op-0")  # a 30 s lease
        await completer.settle(attempt, Completed("r"))
        assert attempt.ending is Ending.COMPLETED
        assert len(service.calls) > 1

    _run(scenario())


def test_past_its_lease_a_settlement_is_left_to_the_lease(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(completer_module, "RETRY_SECONDS", 0.2)

    async def scenario() -> None:
        service = Gone()
        completer = Completer(service.send, batch_size=10, trace_name="test")
        attempt = Attempt(a_claim("op-0"), LeaseStream(_no_stream), lease_seconds=1)
        await completer.settle(attempt, Completed("r"))
        assert attempt.ending is None  # not sent: the sweeper ends the attempt as lost
        assert completer.endings == {}

    _run(scenario())


class ChargedAfter(BackAfter):
    """Stopped (UNAVAILABLE) until ``seconds`` from now, then it refuses every settlement as
    a lost lease, charging the usage of those that carry one."""

    def answer(self, item: Item) -> pb.LeaseMutationsResponse.Outcome:
        charged = item.HasField("usage")
        return pb.LeaseMutationsResponse.Outcome(
            status_code=REFUSED, error_code="lease_lost", usage_charged=charged
        )


def _tokens_counted(model: str) -> float:
    labels = {"task_type": "report.render", "route": "local", "model": model}
    return sum(
        REGISTRY.get_sample_value("durable_ops_model_tokens_total", {**labels, "kind": kind}) or 0.0
        for kind in ("prompt", "completion")
    )


def test_past_its_lease_a_settlement_with_usage_is_offered_until_the_service_takes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An outage longer than the lease: the service back refuses the settlement as a lost
    lease but charges what the model calls used, which an outage left uncharged before."""
    monkeypatch.setattr(completer_module, "RETRY_SECONDS", 0.2)
    model = f"outage-{time.monotonic_ns()}"  # counters of its own on the default registry

    async def scenario() -> None:
        service = ChargedAfter(seconds=1.5)
        completer = Completer(service.send, batch_size=10, trace_name="test")
        attempt = Attempt(a_claim("op-0"), LeaseStream(_no_stream), lease_seconds=1)
        attempt.used(Usage(300, 40, 800), Provenance("127.0.0.1", model, "local"))
        await completer.settle(attempt, Completed("r"))
        assert service.calls[-1][0].usage.completion_tokens == 40  # taken after the lease
        assert attempt.ending is None  # refused: the work is done again
        assert _tokens_counted(model) == 340

    _run(scenario())
