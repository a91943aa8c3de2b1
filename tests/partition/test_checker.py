"""The checker on hand-made histories: each count made non-zero by the case it names, and a
clean history of the same shape giving all zeros. No database, no network."""

from __future__ import annotations

from tests.partition.checker import Counts, Limits, StoredOperation, check
from tests.partition.history import Call, History, Kind, Outcome, load

OK, FAIL, UNKNOWN = Outcome.OK, Outcome.FAIL, Outcome.UNKNOWN


def create(at: float, owner: str, key: str, operation_id: str = "", outcome: Outcome = OK) -> Call:
    result = {"operation_id": operation_id} if operation_id else {}
    return Call("grpc", Kind.CREATE, at, at + 0.1, outcome, {"owner": owner, "key": key}, result)


def admit(at: float, owner: str, key: str, operation_id: str, tokens: int = 10) -> Call:
    return Call(
        "http", Kind.ADMIT, at, at + 0.1, OK,
        {"owner": owner, "key": key, "tokens": str(tokens)}, {"operation_id": operation_id},
    )  # fmt: skip


def claim(at: float, operation_id: str, token: str) -> Call:
    return Call(
        "worker", Kind.CLAIM, at, at + 0.1, OK, {},
        {"operation_id": operation_id, "owner": "alice", "lease_token": token},
    )  # fmt: skip


def complete(at: float, operation_id: str, token: str, outcome: Outcome = OK) -> Call:
    return Call(
        "worker", Kind.COMPLETE, at, at + 0.1, outcome,
        {"operation_id": operation_id, "lease_token": token},
    )  # fmt: skip


def cancel(at: float, owner: str, operation_id: str) -> Call:
    return Call(
        "grpc", Kind.CANCEL, at, at + 0.1, OK, {"owner": owner, "operation_id": operation_id}
    )


def row(
    operation_id: str, owner: str = "alice", key: str = "", state: str = "succeeded",
    attempt: int = 1, reserved: int = 0,
) -> StoredOperation:  # fmt: skip
    return StoredOperation(operation_id, owner, key or f"k-{operation_id}", state, attempt, 3,
                           reserved)  # fmt: skip


def only(counts: Counts) -> dict[str, int]:
    return {name: value for name, value in counts.as_dict().items() if value}


def test_a_clean_history_counts_nothing() -> None:
    calls = [
        create(0, "alice", "k-a", "a"),
        create(0.5, "bob", "k-b", outcome=UNKNOWN),
        create(1.0, "bob", "k-b", "b"),  # the retry of the unknown one, the same operation
        claim(2, "a", "t1"),
        complete(3, "a", "t1", UNKNOWN),
        complete(4, "a", "t1"),  # the same lease asking again
        admit(5, "carol", "k-c", "c"),
        cancel(6, "carol", "c"),
    ]
    rows = [
        row("a"),
        row("b", "bob", state="queued", attempt=0),
        row("c", "carol", state="cancelled"),
    ]
    counts = check(calls, rows, {"a": 1, "c": 1}, Limits(per_user=1, global_=1))
    assert counts.as_dict() == Counts().as_dict()
    assert counts.total() == 0


def test_an_acknowledged_create_that_is_not_stored_is_lost() -> None:
    calls = [create(0, "alice", "k-a", "a"), admit(1, "bob", "k-b", "b")]
    assert only(check(calls, [row("b", "bob", state="queued")], {})) == {
        "lost_acknowledged_creates": 1
    }


def test_a_key_answered_with_two_operations() -> None:
    calls = [create(0, "alice", "k", "a"), create(1, "alice", "k", "b")]
    rows = [row("a", key="k", state="queued"), row("b", key="k", state="queued")]
    assert only(check(calls, rows, {})) == {"key_with_two_operations": 1}


def test_an_unknown_create_that_later_appears_twice() -> None:
    calls = [create(0, "alice", "k", outcome=UNKNOWN), create(1, "alice", "k", "b")]
    rows = [row("a", key="k", state="queued"), row("b", key="k", state="queued")]
    counts = only(check(calls, rows, {}))
    assert counts == {"key_with_two_operations": 1, "unknown_create_twice": 1}


def test_completions_accepted_under_two_leases() -> None:
    calls = [claim(0, "a", "t1"), complete(1, "a", "t1"), complete(1.05, "a", "t2")]
    assert only(check(calls, [row("a")], {"a": 1})) == {"completed_twice": 1}


def test_a_completion_after_a_newer_lease_was_handed_out() -> None:
    calls = [claim(0, "a", "t1"), claim(10, "a", "t2"), complete(11, "a", "t1")]
    counts = only(check(calls, [row("a")], {"a": 1}))
    assert counts == {"completed_by_stale_lease": 1}
    # Overlapping calls are not certain: the newer claim still in flight when it began.
    overlapping = [claim(0, "a", "t1"), claim(10, "a", "t2"), complete(10.05, "a", "t1")]
    assert only(check(overlapping, [row("a")], {"a": 1})) == {}


def test_an_acknowledged_completion_the_row_does_not_show() -> None:
    calls = [claim(0, "a", "t1"), complete(1, "a", "t1")]
    rows = [row("a", state="running")]
    assert only(check(calls, rows, {})) == {"lost_acknowledged_completions": 1}
    # Answered with another state (a cancel won): it did not complete the operation.
    cancelled = Call(
        "worker", Kind.COMPLETE, 1, 1.1, OK, {"operation_id": "a", "lease_token": "t1"},
        {"state": "OPERATION_STATE_CANCELLED"},
    )  # fmt: skip
    rows = [row("a", state="cancelled")]
    assert only(check([calls[0], cancelled], rows, {"a": 1})) == {}


def test_a_terminal_state_without_exactly_one_notification() -> None:
    rows = [row("a"), row("b", state="failed"), row("c", state="cancelled")]
    counts = only(check([], rows, {"a": 2, "c": 1}))
    assert counts == {"terminal_without_one_notification": 2}


def test_a_notification_without_its_terminal_state() -> None:
    rows = [row("a", state="running")]
    counts = only(check([], rows, {"a": 1, "gone": 1}))
    assert counts == {"notification_without_terminal": 2}


def test_attempts_over_the_budget() -> None:
    assert only(check([], [row("a", attempt=4)], {"a": 1})) == {"attempts_over_budget": 1}


def test_capacity_exceeded_per_user_and_overall() -> None:
    calls = [admit(0, "alice", "k1", "a"), admit(1, "alice", "k2", "b"), admit(2, "bob", "k3", "c")]
    rows = [row("a", state="queued"), row("b", state="queued"), row("c", "bob", state="queued")]
    assert only(check(calls, rows, {}, Limits(per_user=1))) == {"capacity_exceeded": 1}
    assert only(check(calls, rows, {}, Limits(global_=2))) == {"capacity_exceeded": 1}
    # An admission answered with the active operation of the same subject holds nothing more.
    reused = [*calls[:1], admit(0.5, "alice", "k4", "a"), *calls[2:]]
    assert only(check(reused, rows[:1] + rows[2:], {}, Limits(per_user=1, global_=2))) == {}
    # Once the first is cancelled (the call began before the second admission ended), it fits.
    freed = [*calls[:1], cancel(0.5, "alice", "a"), *calls[1:]]
    rows[0] = row("a", state="cancelled")
    assert only(check(freed, rows, {"a": 1}, Limits(per_user=1, global_=2))) == {}


def test_a_completion_of_unknown_outcome_may_have_freed_the_capacity() -> None:
    """The first try timed out but took effect; its retry (the same lease) is answered ok
    later. The hold ends when the first try began, not when the retry did."""
    calls = [
        admit(0, "alice", "k1", "a"),
        claim(0.5, "a", "t1"),
        complete(1, "a", "t1", UNKNOWN),
        admit(2, "alice", "k2", "b"),
        complete(3, "a", "t1"),
    ]
    rows = [row("a"), row("b", state="queued")]
    assert only(check(calls, rows, {"a": 1}, Limits(per_user=1))) == {}
    certain = [call for call in calls if call.outcome is not UNKNOWN]
    assert only(check(certain, rows, {"a": 1}, Limits(per_user=1))) == {"capacity_exceeded": 1}


def test_a_token_budget_exceeded() -> None:
    calls = [admit(0, "alice", "k1", "a", 60), admit(1, "bob", "k2", "b", 60)]
    rows = [row("a", state="queued", reserved=60), row("b", "bob", state="queued", reserved=60)]
    limits = Limits(global_daily_tokens=100)
    assert only(check(calls, rows, {}, limits)) == {"token_budget_exceeded": 1}
    assert only(check(calls, rows, {}, Limits(owner_daily_tokens=100))) == {}


def test_a_history_round_trips_through_its_lines() -> None:
    history = History()
    with history.call("grpc", Kind.CREATE, owner="alice", key="k") as pending:
        pending.ok(operation_id="a")
    with history.call("grpc", Kind.CREATE, owner="alice", key="k2"):
        pass  # no answer recorded: unknown
    calls = load(history.dump().splitlines())
    assert [call.outcome for call in calls] == [OK, UNKNOWN]
    assert calls[0].result == {"operation_id": "a"}


def test_every_operation_a_call_names_is_read_back() -> None:
    """A schedule's workers also claim what an earlier schedule left queued, and the SDK
    worker reports a completion as the service settles it, maybe after its schedule read
    its history: the rows read back are those of every operation the history names."""
    from tests.partition.run import named_operations

    leftover = Call(
        "worker", Kind.CLAIM, 0, 0.1, OK, {},
        {"operation_id": "old", "owner": "one-way-alice", "lease_token": "t0"},
    )  # fmt: skip
    created = Call("grpc", Kind.CREATE, 0, 0.1, OK, {"owner": "node-kill-bob", "key": "k"},
                   {"operation_id": "new"})  # fmt: skip
    unknown = Call("grpc", Kind.CREATE, 0, 0.1, UNKNOWN, {"owner": "node-kill-bob", "key": "j"})
    late = complete(1, "settled-late", "t9")
    calls = [leftover, created, unknown, late, complete(2, "new", "t1")]
    assert named_operations(calls) == {"old", "new", "settled-late"}
    rows = [row("old", owner="one-way-alice"), row("new"), row("settled-late")]
    notes = {"old": 1, "new": 1, "settled-late": 1}
    assert only(check(calls, rows, notes)) == {}
    unsettled = [*rows[:2], row("settled-late", state="running")]
    assert only(check(calls, unsettled, notes)) == {
        "lost_acknowledged_completions": 1,
        "notification_without_terminal": 1,
    }
