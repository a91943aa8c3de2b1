"""What a committed transaction changed, told to this process's waiters after COMMIT.

A writer says what it changed (``publish``) from inside the transaction's
work; the database layer keeps it with the attempt that said it and, once
that attempt committed, hands it to every subscriber of ``Database.events``
on the event loop's thread. Only the async runners deliver: a synchronous
caller (a test, the CLI) wakes nobody in this process, and the shared polls
find its changes as they find another replica's.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from durable_ops.model.states import OperationState


@dataclass(frozen=True)
class Changed:
    """One operation this transaction moved (or whose progress it wrote)."""

    operation_id: str
    state: OperationState
    task_type: str = ""
    cancel_asked: bool = False  # this change asked a running attempt to stop
    owner_id: str = ""  # whose operation: what an owner's watch (``WatchOwner``) is woken by
    # Queued but not claimable yet (a later ``not_before``): no claim is woken for it; the
    # claim poll finds it once due (ADR 0046).
    scheduled: bool = False


@dataclass(frozen=True)
class Requeued:
    """Work became claimable again, of kinds and amounts unknown (a sweep's requeue)."""


Committed = Changed | Requeued
Subscriber = Callable[[Sequence[Committed]], None]

_SAID: contextvars.ContextVar[list[Committed] | None] = contextvars.ContextVar(
    "durable_ops_published", default=None
)


def publish(change: Committed) -> None:
    """Say, from inside a transaction's work, what it changed; ignored outside a runner."""
    said = _SAID.get()
    if said is not None:
        said.append(change)


@contextmanager
def collecting() -> Iterator[list[Committed]]:
    """What the work run inside says it changed (one attempt of a transaction)."""
    said: list[Committed] = []
    token = _SAID.set(said)
    try:
        yield said
    finally:
        _SAID.reset(token)


class Bus:
    """This process's subscribers to committed changes."""

    def __init__(self) -> None:
        self._subscribers: list[Subscriber] = []

    def subscribe(self, subscriber: Subscriber) -> None:
        self._subscribers.append(subscriber)

    def unsubscribe(self, subscriber: Subscriber) -> None:
        if subscriber in self._subscribers:
            self._subscribers.remove(subscriber)

    def deliver(self, changes: Sequence[Committed]) -> None:
        if changes:
            for subscriber in list(self._subscribers):
                subscriber(changes)
