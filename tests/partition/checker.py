"""The checker: a recorded history and the final rows in, a count per broken promise out. Pure.

It checks durable-ops' own promises (SPEC: no lost acknowledged create, one
operation per idempotency key, no operation completed twice or by a lease that
was no longer current, one notification per terminal outcome, attempts within
the budget, AI capacity and token budgets never exceeded), not a general
isolation level: it does not look for stale reads, lost updates between
unrelated rows or the order of notifications (docs/partitions.md).

Times are the history's (one monotonic clock). Where the history cannot tell
when something happened inside a call, the checker takes the reading that
acquits: an admission holds capacity only from the end of its acknowledged call
to the start of the first call that may have ended the operation (a completion
or cancel answered ok or of unknown outcome), so a count over a limit is
certain, never an artefact of overlapping calls or of a retried call.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields

from tests.partition.history import Call, Kind, Outcome

TERMINAL = frozenset({"succeeded", "failed", "cancelled"})
FOREVER = float("inf")


@dataclass(frozen=True)
class StoredOperation:
    """One row of ``user_operations`` after the run (read once every node has healed)."""

    id: str
    owner: str
    idempotency_key: str
    state: str
    attempt: int
    max_attempts: int
    reserved_tokens: int = 0


@dataclass(frozen=True)
class Limits:
    """What admission was configured with during the run (0: no limit of that kind)."""

    per_user: int = 0
    global_: int = 0
    owner_daily_tokens: int = 0
    global_daily_tokens: int = 0


@dataclass(frozen=True)
class Counts:
    """Every count the product promises is 0."""

    lost_acknowledged_creates: int = 0  # create/admit answered ok, its operation not stored
    key_with_two_operations: int = 0  # one (owner, key), two operation ids seen
    completed_twice: int = 0  # completions accepted under two different leases
    completed_by_stale_lease: int = 0  # accepted after a newer lease had certainly been issued
    lost_acknowledged_completions: int = 0  # completion answered ok, the row not succeeded
    terminal_without_one_notification: int = 0
    notification_without_terminal: int = 0
    attempts_over_budget: int = 0
    capacity_exceeded: int = 0  # admissions that began an instant over a limit
    token_budget_exceeded: int = 0  # admissions that began an instant over a token budget
    unknown_create_twice: int = 0  # a create of unknown outcome whose key has two operations

    def as_dict(self) -> dict[str, int]:
        return {field.name: getattr(self, field.name) for field in fields(self)}

    def total(self) -> int:
        return sum(self.as_dict().values())


def check(
    calls: Sequence[Call],
    operations: Iterable[StoredOperation],
    notifications: Mapping[str, int],
    limits: Limits | None = None,
) -> Counts:
    """``notifications``: how many notification rows each operation id has."""
    limits = limits or Limits()
    stored = {row.id: row for row in operations}
    return Counts(
        lost_acknowledged_creates=_lost_creates(calls, stored),
        key_with_two_operations=len(_keys_with_two_operations(calls, stored.values())),
        completed_twice=_completed_twice(calls),
        completed_by_stale_lease=_stale_completions(calls),
        lost_acknowledged_completions=_lost_completions(calls, stored),
        terminal_without_one_notification=sum(
            1 for row in stored.values() if row.state in TERMINAL and notifications.get(row.id) != 1
        ),
        notification_without_terminal=sum(
            1
            for operation_id, count in notifications.items()
            if count and (operation_id not in stored or stored[operation_id].state not in TERMINAL)
        ),
        attempts_over_budget=sum(1 for row in stored.values() if row.attempt > row.max_attempts),
        capacity_exceeded=_over(calls, stored, limits.per_user, limits.global_, weighted=False),
        token_budget_exceeded=_over(
            calls, stored, limits.owner_daily_tokens, limits.global_daily_tokens, weighted=True
        ),
        unknown_create_twice=_unknown_twice(calls, stored.values()),
    )


def _creates(calls: Iterable[Call]) -> Iterable[Call]:
    return (call for call in calls if call.kind in (Kind.CREATE, Kind.ADMIT))


def _lost_creates(calls: Sequence[Call], stored: Mapping[str, StoredOperation]) -> int:
    return sum(
        1
        for call in _creates(calls)
        if call.outcome is Outcome.OK and call.result.get("operation_id") not in stored
    )


def _ids_by_key(
    calls: Sequence[Call], rows: Iterable[StoredOperation]
) -> dict[tuple[str, str], set[str]]:
    ids: dict[tuple[str, str], set[str]] = defaultdict(set)
    for row in rows:
        ids[(row.owner, row.idempotency_key)].add(row.id)
    for call in _creates(calls):
        if call.outcome is Outcome.OK and call.result.get("operation_id"):
            ids[(call.args["owner"], call.args["key"])].add(call.result["operation_id"])
    return ids


def _keys_with_two_operations(
    calls: Sequence[Call], rows: Iterable[StoredOperation]
) -> set[tuple[str, str]]:
    return {key for key, ids in _ids_by_key(calls, rows).items() if len(ids) > 1}


def _unknown_twice(calls: Sequence[Call], rows: Iterable[StoredOperation]) -> int:
    doubled = _keys_with_two_operations(calls, rows)
    unknown = {
        (call.args["owner"], call.args["key"])
        for call in _creates(calls)
        if call.outcome is Outcome.UNKNOWN
    }
    return len(unknown & doubled)


def _accepted_completions(calls: Sequence[Call]) -> list[Call]:
    """Completions answered ok with the operation succeeded (an answer may name another
    state, as for a cancel that won: then this completion did not complete it)."""
    return [
        call
        for call in calls
        if call.kind is Kind.COMPLETE
        and call.outcome is Outcome.OK
        and call.result.get("state", "OPERATION_STATE_SUCCEEDED") == "OPERATION_STATE_SUCCEEDED"
    ]


def _completed_twice(calls: Sequence[Call]) -> int:
    """A lease holder asking again (the same token) is answered what it was first: not twice."""
    tokens: dict[str, set[str]] = defaultdict(set)
    for call in _accepted_completions(calls):
        tokens[call.args["operation_id"]].add(call.args["lease_token"])
    return sum(1 for seen in tokens.values() if len(seen) > 1)


def _stale_completions(calls: Sequence[Call]) -> int:
    """A completion accepted under lease A, begun after a claim that began after A was handed
    out had handed out lease B: B was certainly current, A certainly not."""
    claims: dict[str, list[Call]] = defaultdict(list)
    for call in calls:
        if call.kind is Kind.CLAIM and call.outcome is Outcome.OK:
            claims[call.result["operation_id"]].append(call)
    stale = 0
    for completion in _accepted_completions(calls):
        of_it = claims.get(completion.args["operation_id"], [])
        token = completion.args["lease_token"]
        mine = [claim for claim in of_it if claim.result["lease_token"] == token]
        if not mine:
            continue  # a claim the history does not hold: nothing certain to say
        handed_out = min(claim.ended for claim in mine)
        if any(
            claim.result["lease_token"] != token
            and claim.invoked > handed_out
            and claim.ended < completion.invoked
            for claim in of_it
        ):
            stale += 1
    return stale


def _lost_completions(calls: Sequence[Call], stored: Mapping[str, StoredOperation]) -> int:
    lost = {
        call.args["operation_id"]
        for call in _accepted_completions(calls)
        if (row := stored.get(call.args["operation_id"])) is None or row.state != "succeeded"
    }
    return len(lost)


def _over(
    calls: Sequence[Call],
    stored: Mapping[str, StoredOperation],
    per_owner: int,
    overall: int,
    *,
    weighted: bool,
) -> int:
    """How many acknowledged admissions began at an instant when what was certainly held
    (an admission's count, or its reserved tokens) passed the owner's or the global limit."""
    if not per_owner and not overall:
        return 0
    # When the first call that may have ended the operation began: an unknown completion or
    # cancel may have taken effect at once, and an ok one asked again later says nothing more.
    ends: dict[str, float] = {}
    for call in calls:
        if call.outcome is not Outcome.FAIL and call.kind in (Kind.COMPLETE, Kind.CANCEL):
            operation_id = call.args["operation_id"]
            ends[operation_id] = min(ends.get(operation_id, FOREVER), call.invoked)
    points: list[tuple[float, int, str, int]] = []  # time, +1 begins / -1 ends, owner, weight
    counted: set[str] = set()  # an admission of a subject with an active one reuses it
    for call in sorted(calls, key=lambda call: call.ended):
        if call.kind is not Kind.ADMIT or call.outcome is not Outcome.OK:
            continue
        operation_id = call.result["operation_id"]
        if operation_id in counted:
            continue
        counted.add(operation_id)
        row = stored.get(operation_id)
        if operation_id in ends:
            end = ends[operation_id]
        elif row is not None and row.state not in TERMINAL:
            end = FOREVER  # still holding at the end of the run
        else:
            continue  # ended by a call the history does not hold: when is unknown
        if end <= call.ended:
            continue
        weight = 1
        if weighted:
            weight = row.reserved_tokens if row and row.reserved_tokens else 0
            weight = weight or int(call.args.get("tokens", "0"))
        owner = call.args["owner"]
        points.append((call.ended, 1, owner, weight))
        if end != FOREVER:
            points.append((end, -1, owner, weight))
    points.sort(key=lambda point: (point[0], point[1]))  # ends first at one instant
    held: Counter[str] = Counter()
    total = 0
    exceeded = 0
    for _, sign, owner, weight in points:
        held[owner] += sign * weight
        total += sign * weight
        if sign > 0 and ((per_owner and held[owner] > per_owner) or (overall and total > overall)):
            exceeded += 1
    return exceeded
