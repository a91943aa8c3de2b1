"""The pure rules of a long-poll: when a waiter has its answer (the end, a change of state,
a change from the version it saw), how ``seen`` is read, and the ``Retry-After`` of an
answer."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from durable_ops.gateway.dto import parse_rfc3339, rfc3339
from durable_ops.model.lifecycle import LOOK_AGAIN_SECONDS, look_again_after
from durable_ops.model.states import OperationState
from durable_ops.operations.watch import answers
from durable_ops.storage.operations import Version

SEEN = datetime(2026, 12, 1, 10, 0, 0, 123456, tzinfo=UTC)
LATER = SEEN + timedelta(microseconds=1)


@pytest.mark.parametrize(
    ("seen", "version", "expected"),
    [
        (None, Version(OperationState.RUNNING, LATER), False),  # a move; it waits for the end
        (None, Version(OperationState.SUCCEEDED, SEEN), True),
        (SEEN, Version(OperationState.RUNNING, SEEN), False),  # what it saw: it waits on
        (SEEN, Version(OperationState.RUNNING, LATER), True),  # one microsecond is a change
        (LATER, Version(OperationState.QUEUED, SEEN), True),  # different, not only newer
        (SEEN, Version(OperationState.CANCELLED, SEEN), True),
        (SEEN, None, True),  # gone: its read says not found
        (None, None, True),
    ],
)
def test_when_a_waiter_has_its_answer(
    seen: datetime | None, version: Version | None, expected: bool
) -> None:
    assert answers(seen, version) is expected


@pytest.mark.parametrize(
    ("seen", "began", "version", "expected"),
    [
        (None, OperationState.QUEUED, Version(OperationState.RUNNING, LATER), True),  # it starts
        (None, OperationState.RUNNING, Version(OperationState.RUNNING, LATER), False),  # a beat
        (None, OperationState.RUNNING, Version(OperationState.WAITING_FOR_RETRY, LATER), True),
        (None, OperationState.QUEUED, Version(OperationState.SUCCEEDED, LATER), True),
        (SEEN, OperationState.RUNNING, Version(OperationState.RUNNING, LATER), True),  # seen moved
        (SEEN, OperationState.RUNNING, Version(OperationState.RUNNING, SEEN), False),
        (None, OperationState.QUEUED, None, True),
    ],
)
def test_a_change_of_state_answers_a_waiter_that_asks_for_it(
    seen: datetime | None, began: OperationState, version: Version | None, expected: bool
) -> None:
    assert answers(seen, version, began) is expected


@pytest.mark.parametrize("state", [state for state in OperationState if state.is_terminal])
def test_every_end_answers_a_waiter_of_the_end(state: OperationState) -> None:
    assert answers(None, Version(state, SEEN))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-12-01T10:00:00.123456Z", SEEN),
        ("2026-12-01t10:00:00.123456z", SEEN),
        ("2026-12-01T12:00:00.123456+02:00", SEEN),
        ("2026-12-01T10:00:00.123456789Z", SEEN),  # finer than microseconds is cut off
        ("2026-12-01T10:00:00Z", SEEN.replace(microsecond=0)),
    ],
)
def test_rfc3339_times_read_as_utc(text: str, expected: datetime) -> None:
    assert parse_rfc3339(text) == expected


def test_what_the_dto_writes_reads_back_exactly() -> None:
    assert parse_rfc3339(rfc3339(SEEN)) == SEEN


@pytest.mark.parametrize(
    "text",
    [
        "",
        "2026-12-01",
        "2026-12-01T10:00:00",  # no offset: ambiguous
        "2026-12-01 10:00:00Z",
        "2026-13-01T10:00:00Z",
        "2026-12-01T10:00:60Z",
        "0001-01-01T00:00:00+01:00",  # before year 1 in UTC
        "9999-12-31T23:59:59-01:00",
        "\uff12\uff10\uff12\uff16-12-01T10:00:00Z",  # fullwidth digits
        " 2026-12-01T10:00:00Z",
    ],
)
def test_anything_else_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"."):
        parse_rfc3339(text)


# ---- Retry-After: when an answer's operation may have moved (``lifecycle.look_again_after``)


def _look_again(
    state: OperationState,
    *,
    not_before: datetime | None = None,
    next_attempt_at: datetime | None = None,
    deadline_at: datetime | None = None,
) -> int | None:
    return look_again_after(
        state,
        not_before=not_before,
        next_attempt_at=next_attempt_at,
        deadline_at=deadline_at,
        now=SEEN,
    )


@pytest.mark.parametrize("state", [state for state in OperationState if state.is_terminal])
def test_an_ended_operation_has_no_retry_after(state: OperationState) -> None:
    assert _look_again(state, not_before=SEEN + timedelta(days=2)) is None


def test_a_scheduled_operation_is_worth_a_look_at_its_time_not_in_a_second() -> None:
    in_two_days = SEEN + timedelta(days=2)
    waits = _look_again(
        OperationState.QUEUED, not_before=in_two_days, deadline_at=in_two_days + timedelta(hours=1)
    )
    assert waits == 2 * 24 * 3600
    assert _look_again(OperationState.QUEUED, not_before=SEEN + timedelta(seconds=0.2)) == 1


def test_a_waiting_retry_is_worth_a_look_at_its_next_attempt_or_its_deadline() -> None:
    soon = SEEN + timedelta(seconds=90.5)
    assert _look_again(OperationState.WAITING_FOR_RETRY, next_attempt_at=soon) == 91
    deadline = SEEN + timedelta(seconds=30)
    waits = _look_again(
        OperationState.WAITING_FOR_RETRY, next_attempt_at=soon, deadline_at=deadline
    )
    assert waits == 30  # failed closed then, before its next attempt


@pytest.mark.parametrize(
    ("state", "not_before"),
    [
        (OperationState.QUEUED, None),  # due now: a worker may take it at any moment
        (OperationState.QUEUED, SEEN - timedelta(days=1)),  # its time has passed
        (OperationState.RUNNING, SEEN - timedelta(days=1)),
        (OperationState.WAITING_FOR_EXTERNAL_FALLBACK, None),
    ],
)
def test_any_other_live_operation_is_worth_a_look_in_a_second(
    state: OperationState, not_before: datetime | None
) -> None:
    assert _look_again(state, not_before=not_before) == LOOK_AGAIN_SECONDS == 1
