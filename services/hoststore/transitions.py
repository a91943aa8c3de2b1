"""Operation states and the transition table of the host store (seed 002). Pure.

Success and recovery labels are assertions by the caller, not proof: the
executor must verify actual effects before recording them.
"""

from __future__ import annotations

from enum import StrEnum
from functools import cache
from typing import Final

from durable_ops.hoststore.errors import ForbiddenTransition, InvalidInput


class State(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    CANCELLED = "cancelled"
    SUCCEEDED = "succeeded"
    FAILED_RECOVERED = "failed_recovered"
    NEEDS_ATTENTION = "needs_attention"
    UNKNOWN = "unknown"

    @property
    def is_terminal(self) -> bool:
        return not ALLOWED[self]


ALLOWED: Final[dict[State, frozenset[State]]] = {
    State.QUEUED: frozenset({State.RUNNING, State.CANCELLED}),
    State.RUNNING: frozenset(
        {State.SUCCEEDED, State.FAILED_RECOVERED, State.NEEDS_ATTENTION, State.UNKNOWN}
    ),
    State.NEEDS_ATTENTION: frozenset({State.SUCCEEDED, State.FAILED_RECOVERED}),
    State.UNKNOWN: frozenset({State.SUCCEEDED, State.FAILED_RECOVERED}),
    State.SUCCEEDED: frozenset(),
    State.FAILED_RECOVERED: frozenset(),
    State.CANCELLED: frozenset(),
}

INITIAL: Final = State.QUEUED
TERMINAL: Final = frozenset(state for state, targets in ALLOWED.items() if not targets)
UNRESOLVED: Final = frozenset(State) - TERMINAL


def parse_state(value: str) -> State:
    try:
        return State(value)
    except ValueError:
        raise InvalidInput(f"unknown operation state {value!r}") from None


def check_transition(current: State, target: State) -> None:
    if target not in ALLOWED[current]:
        if current is State.RUNNING and target is State.RUNNING:
            raise ForbiddenTransition("the operation is already claimed (running)")
        raise ForbiddenTransition(f"transition {current} -> {target} is not allowed")


@cache
def _longest_path(state: State) -> int:
    return max((1 + _longest_path(target) for target in ALLOWED[state]), default=0)


# The table is acyclic, so a record can change at most this many times; revisions
# start at 1, which bounds both the revision and a record's growth on disk.
MAX_REVISION: Final = 1 + _longest_path(INITIAL)
