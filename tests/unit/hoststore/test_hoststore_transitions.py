"""The transition table of seed 002, written out by hand from the seed text."""

from __future__ import annotations

import itertools

import pytest

from durable_ops.hoststore.errors import ForbiddenTransition, InvalidInput
from durable_ops.hoststore.transitions import (
    MAX_REVISION,
    TERMINAL,
    UNRESOLVED,
    State,
    check_transition,
    parse_state,
)

S = State

# queued → running | cancelled
# running → succeeded | failed_recovered | needs_attention | unknown
# needs_attention / unknown → succeeded | failed_recovered
# terminal states → no transitions
SEED_TABLE = {
    (S.QUEUED, S.RUNNING),
    (S.QUEUED, S.CANCELLED),
    (S.RUNNING, S.SUCCEEDED),
    (S.RUNNING, S.FAILED_RECOVERED),
    (S.RUNNING, S.NEEDS_ATTENTION),
    (S.RUNNING, S.UNKNOWN),
    (S.NEEDS_ATTENTION, S.SUCCEEDED),
    (S.NEEDS_ATTENTION, S.FAILED_RECOVERED),
    (S.UNKNOWN, S.SUCCEEDED),
    (S.UNKNOWN, S.FAILED_RECOVERED),
}


@pytest.mark.parametrize(("current", "target"), list(itertools.product(State, State)))
def test_every_pair_follows_the_seed_table(current: State, target: State) -> None:
    if (current, target) in SEED_TABLE:
        check_transition(current, target)
    else:
        with pytest.raises(ForbiddenTransition):
            check_transition(current, target)


def test_terminal_and_unresolved_states() -> None:
    assert frozenset({S.SUCCEEDED, S.FAILED_RECOVERED, S.CANCELLED}) == TERMINAL
    assert frozenset({S.QUEUED, S.RUNNING, S.NEEDS_ATTENTION, S.UNKNOWN}) == UNRESOLVED
    assert all(state.is_terminal for state in TERMINAL)
    assert not any(state.is_terminal for state in UNRESOLVED)


def test_a_second_claim_is_refused() -> None:
    check_transition(S.QUEUED, S.RUNNING)
    with pytest.raises(ForbiddenTransition, match="already claimed"):
        check_transition(S.RUNNING, S.RUNNING)


def test_longest_path_bounds_the_revision() -> None:
    # queued(1) -> running(2) -> needs_attention|unknown(3) -> succeeded|failed_recovered(4)
    assert MAX_REVISION == 4


def test_state_names_parse_and_unknown_names_are_refused() -> None:
    assert parse_state("failed_recovered") is S.FAILED_RECOVERED
    assert parse_state(S.UNKNOWN) is S.UNKNOWN
    with pytest.raises(InvalidInput):
        parse_state("failed")
