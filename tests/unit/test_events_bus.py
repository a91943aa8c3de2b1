"""The in-process bus of committed changes (``storage.events``): what a transaction's work
says is kept only while that attempt runs, and every subscriber hears each delivery, even
when one of them leaves while it is being told."""

from __future__ import annotations

from collections.abc import Sequence

from durable_ops.model.states import OperationState
from durable_ops.storage.events import Bus, Changed, Committed, Requeued, collecting, publish

QUEUED = Changed("op-1", OperationState.QUEUED, "report.build")
LATER = Changed("op-2", OperationState.QUEUED, "report.build")


def test_what_is_said_after_an_attempt_is_not_added_to_it() -> None:
    """An attempt's list is handed to the waiters once it committed: a change said after the
    attempt (outside any runner) would be delivered with it, though never committed."""
    with collecting() as said:
        publish(QUEUED)
    publish(LATER)
    assert said == [QUEUED]


def test_a_nested_attempt_keeps_its_changes_apart_from_the_outer_one() -> None:
    with collecting() as outer:
        with collecting() as inner:
            publish(QUEUED)
        publish(LATER)
    assert (outer, inner) == ([LATER], [QUEUED])


class Subscriber:
    def __init__(self, bus: Bus, *, leaves: bool = False) -> None:
        self.bus = bus
        self.leaves = leaves
        self.heard: list[Committed] = []
        bus.subscribe(self)

    def __call__(self, changes: Sequence[Committed]) -> None:
        self.heard.extend(changes)
        if self.leaves:  # a poll closed by what it was told, say
            self.bus.unsubscribe(self)


def test_a_subscriber_leaving_during_a_delivery_does_not_hide_it_from_the_next() -> None:
    bus = Bus()
    leaving = Subscriber(bus, leaves=True)
    staying = Subscriber(bus)
    bus.deliver([QUEUED])
    assert (leaving.heard, staying.heard) == ([QUEUED], [QUEUED])
    bus.deliver([Requeued()])
    assert (leaving.heard, staying.heard) == ([QUEUED], [QUEUED, Requeued()])


def test_leaving_twice_or_without_joining_is_harmless() -> None:
    """A poll closed twice (its app's ``close`` after a failed start, say) must not raise."""
    bus = Bus()
    subscriber = Subscriber(bus)
    bus.unsubscribe(subscriber)
    bus.unsubscribe(subscriber)
    bus.unsubscribe(Subscriber(Bus()))
    bus.deliver([QUEUED])
    assert subscriber.heard == []


def test_an_empty_commit_tells_nobody() -> None:
    bus = Bus()
    calls: list[Sequence[Committed]] = []
    bus.subscribe(calls.append)
    bus.deliver([])
    assert calls == []
