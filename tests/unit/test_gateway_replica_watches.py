"""The event stream watches every Operations replica: the targets it splits, and the
changes it sends once each, never a late one over a newer one."""

from __future__ import annotations

import asyncio

import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.gateway.backends import Backends, BackendSpec
from durable_ops.gateway.events import SentChanges
from durable_ops.model.addresses import named_host, replica_targets
from tests.unit.test_gateway_limits import Clock


@pytest.mark.parametrize(
    ("target", "replicas"),
    [
        ("127.0.0.1:50051", ["127.0.0.1:50051"]),
        ("ipv4:127.0.0.1:1,127.0.0.1:2", ["ipv4:127.0.0.1:1", "ipv4:127.0.0.1:2"]),
        ("ipv6:[::1]:1,[::1]:2", ["ipv6:[::1]:1", "ipv6:[::1]:2"]),
        ("ipv4:10.0.0.5:50051", ["ipv4:10.0.0.5:50051"]),
        ("dns:///operations:50051", ["dns:///operations:50051"]),
        ("ipv4:", ["ipv4:"]),
    ],
)
def test_a_target_lists_its_replicas(target: str, replicas: list[str]) -> None:
    assert replica_targets(target) == replicas


@pytest.mark.parametrize(
    ("target", "named"),
    [
        ("operations:50051", ("operations", 50051)),
        ("dns:///operations:50051", ("operations", 50051)),
        ("dns:operations:7", ("operations", 7)),
        ("127.0.0.1:50051", None),
        ("[::1]:50051", None),
        ("ipv4:127.0.0.1:1,127.0.0.1:2", None),
        ("a:1,b:2", None),
        ("operations", None),
        ("unix:/run/ops.sock", None),
    ],
)
def test_a_target_naming_one_host_by_name_is_resolved_for_its_replicas(
    target: str, named: tuple[str, int] | None
) -> None:
    assert named_host(target) == named


def test_the_replicas_of_a_name_are_the_addresses_it_resolves_to() -> None:
    backends = Backends(
        None,  # type: ignore[arg-type]  # no call is made: only the replicas are asked
        [
            BackendSpec("operations", "localhost:50051", "ops"),
            BackendSpec("listed", "ipv4:127.0.0.2:1,127.0.0.3:1", "ops"),
        ],
    )
    assert asyncio.run(backends.replicas("operations")) == ["ipv4:127.0.0.1:50051"]
    assert asyncio.run(backends.replicas("listed")) == ["ipv4:127.0.0.2:1", "ipv4:127.0.0.3:1"]


def change(
    operation_id: str,
    seconds: int,
    state: pb.OperationState.ValueType,
    text: str = "",
    replica: int = 0,
) -> pb.OwnerChange:
    operation = pb.Operation(
        id=operation_id,
        state=state,
        updated_at=Timestamp(seconds=seconds),
    )
    found = pb.OwnerChange(event_id=f"{seconds * 1_000_000}-{replica}", operation=operation)
    if text:
        found.draft.CopyFrom(pb.AnswerDraft(operation_id=operation_id, attempt=1, text=text))
    return found


RUNNING = pb.OPERATION_STATE_RUNNING
SUCCEEDED = pb.OPERATION_STATE_SUCCEEDED


def test_a_change_every_replica_reports_is_sent_once() -> None:
    sent = SentChanges()
    assert sent.to_send(change("op", 10, RUNNING, '{"s', replica=0))
    assert not sent.to_send(change("op", 10, RUNNING, '{"s', replica=1))


def test_a_late_read_of_a_version_already_sent_does_not_undo_a_newer_one() -> None:
    sent = SentChanges()
    assert sent.to_send(change("op", 10, RUNNING, '{"s'))
    assert sent.to_send(change("op", 11, SUCCEEDED))
    assert not sent.to_send(change("op", 10, RUNNING, '{"s', replica=1))


def test_a_new_version_goes_out_even_when_a_lagging_clock_stamped_it_earlier() -> None:
    sent = SentChanges()
    assert sent.to_send(change("op", 11, RUNNING, '{"s'))
    assert sent.to_send(change("op", 10, RUNNING, '{"summary'))


def test_a_page_a_late_unseen_read_set_back_is_healed_by_the_newer_version_again() -> None:
    sent = SentChanges()
    assert sent.to_send(change("op", 12, SUCCEEDED))  # pushed by the replica that committed it
    assert sent.to_send(change("op", 11, RUNNING, '{"s', replica=1))  # read before that commit
    assert sent.to_send(change("op", 12, SUCCEEDED, replica=1))  # that replica's next read


def test_operations_are_ranked_apart() -> None:
    sent = SentChanges()
    assert sent.to_send(change("a", 12, SUCCEEDED))
    assert sent.to_send(change("b", 12, SUCCEEDED))
    assert not sent.to_send(change("b", 12, SUCCEEDED, replica=1))


def test_a_stream_remembers_the_operations_of_its_last_minute_not_all_it_saw() -> None:
    clock = Clock()
    sent = SentChanges(clock)
    for n in range(10_000):  # a day-long stream: one operation finished every 6 s
        clock.now = n * 6.0
        assert sent.to_send(change(f"op-{n}", n, SUCCEEDED))
    assert len(sent) == SentChanges.FORGET_SECONDS // 6 + 1


def test_an_operation_reported_again_within_the_minute_is_still_remembered() -> None:
    clock = Clock()
    sent = SentChanges(clock)
    assert sent.to_send(change("a", 10, SUCCEEDED))
    for _ in range(5):  # each watch's overlapping re-read keeps it
        clock.now += SentChanges.FORGET_SECONDS / 2
        assert sent.to_send(change("b", int(clock.now), RUNNING))
        assert not sent.to_send(change("a", 10, SUCCEEDED, replica=1))
    clock.now += SentChanges.FORGET_SECONDS + 1
    assert sent.to_send(change("c", int(clock.now), RUNNING))
    assert len(sent) == 1  # a and b forgotten: nothing reports them any more
