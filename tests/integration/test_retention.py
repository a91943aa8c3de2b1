"""Retention with idempotency tombstones (ADR 0021), through the real servers, on both engines.

An operator's ``PruneOperations`` (and ``opsctl operations prune``) deletes
terminal operations finished before the horizon, in batches, keeping one
tombstone each; a create that repeats a pruned key is refused with
``ALREADY_EXISTS``/``operation_pruned`` and nothing runs again; the
notification and a published workspace note stay, without their operation
id; tombstones past their own horizon are forgotten and the key is free.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, MutableMapping
from datetime import datetime, timedelta
from typing import Any

import grpc
import pytest
from prometheus_client import CollectorRegistry
from sqlalchemy import func, insert, select
from structlog.testing import capture_logs

from durable_ops.api.operator.v1 import operator_pb2 as opb
from durable_ops.model import retention as retention_rules
from durable_ops.model.concurrency_limits import Concurrency
from durable_ops.model.errors import NotFound
from durable_ops.model.retention import RetentionPolicy
from durable_ops.model.scope import Role
from durable_ops.operations import pruner
from durable_ops.operations.metrics import OperationsMetrics
from durable_ops.operations.pruner import prune, run_pruner
from durable_ops.operations.tuning import Tuning
from durable_ops.operator_cli import EXIT_NOT_CONFIRMED
from durable_ops.storage import operations, retention, workspace
from durable_ops.storage.schema import (
    AiWorkspaceNote,
    ConcurrencySlot,
    OperationAttempt,
    OperationTombstone,
    UserNotification,
)
from durable_ops.storage.tx import OperatorTx
from tests.support.clock import ManualClock
from tests.support.grpc_services import Services, metadata, running_services
from tests.support.operations_client import (
    ALICE,
    BOB,
    OTHER_TASK,
    QUEUED,
    RUNNING,
    Metadata,
    OpsClient,
    expect_failure,
)
from tests.support.stored import operation, row, rows, scalar

DAY = 86400.0
INVALID = grpc.StatusCode.INVALID_ARGUMENT
EXISTS = grpc.StatusCode.ALREADY_EXISTS


def _prune(
    services: Services,
    md: Metadata,
    older_than: timedelta,
    tombstones: timedelta | None = None,
    **fields: int | bool,
) -> opb.PruneOperationsResponse:
    request = opb.PruneOperationsRequest(**fields)  # type: ignore[arg-type]
    request.older_than.FromTimedelta(older_than)
    if tombstones is not None:
        request.tombstones_older_than.FromTimedelta(tombstones)
    answer: opb.PruneOperationsResponse = services.operator.PruneOperations(request, metadata=md)
    return answer


def _succeed(ops: OpsClient, owner: str, key: str) -> str:
    created = ops.create(owner, key)
    lease = ops.claim_one()
    assert lease.id == created.id
    ops.complete(lease)
    return created.id


def _fail(ops: OpsClient, owner: str, key: str) -> str:
    created = ops.create(owner, key, max_attempts=1)
    lease = ops.claim_one()
    assert lease.id == created.id
    ops.fail(lease, retryable=False, message="the model refused")
    return created.id


def ops_row_exists(services: Services, operation_id: str) -> bool:
    return operation(services.db, operation_id) is not None


def _tombstones(services: Services) -> dict[str, OperationTombstone]:
    return {row.id: row for row in rows(services.db, select(OperationTombstone))}


def _attempts_of(services: Services, operation_id: str) -> int:
    of_it = OperationAttempt.operation_id == operation_id
    return int(scalar(services.db, select(func.count()).where(of_it)) or 0)


def _note_of(services: Services, owner: str, operation_id: str) -> str:
    """A published workspace note of ``operation_id``, as the AI worker leaves one."""
    note_id = operation_id[::-1]
    note = {
        "id": note_id,
        "owner_user_id": owner,
        "kind": "ai.job_strategy_snapshot",
        "subject_type": "job",
        "subject_id": "job-1",
        "operation_id": operation_id,
        "body": '{"summary": "kept"}',
        "created_at": services.clock(),
        "updated_at": services.clock(),
    }
    services.db.run(lambda tx: tx.execute(insert(workspace.NOTES), note), owner_id=None)
    return note_id


def test_prune_removes_only_terminal_operations_past_the_horizon(
    services: Services, ops: OpsClient, clock: ManualClock, operator_md: Metadata
) -> None:
    succeeded = _succeed(ops, ALICE, "k-old-done")
    failed = _fail(ops, BOB, "k-old-failed")
    cancelled = ops.cancel(BOB, ops.create(BOB, "k-old-cancelled").id).id
    running = ops.create(BOB, "k-old-running", task_type=OTHER_TASK)
    lease = ops.claim_one((OTHER_TASK,), lease_seconds=600)
    assert lease.id == running.id
    queued = ops.create(ALICE, "k-old-queued", task_type=OTHER_TASK).id  # not claimed below
    note = _note_of(services, ALICE, succeeded)
    assert _attempts_of(services, succeeded) == 1
    clock.advance(31 * DAY)
    recent = _succeed(ops, ALICE, "k-recent-done")

    dry = _prune(services, operator_md, timedelta(days=30), dry_run=True)
    assert (dry.pruned, dry.forgotten, dry.more) == (3, 0, False)
    assert ops_row_exists(services, succeeded)  # a dry run removes nothing

    with capture_logs() as logs:
        answer = _prune(services, operator_md, timedelta(days=30))
    assert (answer.pruned, answer.forgotten, answer.more) == (3, 0, False)
    assert answer.finished_before.ToDatetime().date() == (clock() - timedelta(days=30)).date()
    for gone in (succeeded, failed, cancelled):
        assert not ops_row_exists(services, gone)
        assert _attempts_of(services, gone) == 0  # attempts go with their operation
    for kept in (queued, running.id, recent):
        assert ops_row_exists(services, kept)
    assert ops.get(BOB, running.id).state == RUNNING
    assert ops.get(ALICE, queued).state == QUEUED

    tombstones = _tombstones(services)
    assert set(tombstones) == {succeeded, failed, cancelled}
    assert (tombstones[failed].owner_user_id, tombstones[failed].final_state) == (BOB, "failed")
    assert tombstones[succeeded].idempotency_key == "k-old-done"
    # The notifications stay, without their operation; so does the published note.
    assert sorted(n.outcome for n in ops.all_notifications(BOB)) == ["cancelled", "failed"]
    assert [n.outcome for n in ops.all_notifications(ALICE)] == ["succeeded", "succeeded"]
    orphans = rows(
        services.db, select(UserNotification).where(UserNotification.operation_id.is_(None))
    )
    kept_note = row(services.db, select(AiWorkspaceNote).where(AiWorkspaceNote.id == note))
    assert len(orphans) == 3
    assert kept_note is not None
    assert (kept_note.operation_id, kept_note.body) == (None, '{"summary": "kept"}')
    assert [(e["operator"], e["pruned"]) for e in logs if e["event"] == "operator_prune"] == [
        ("ops-carol", 3)
    ]

    again = _prune(services, operator_md, timedelta(days=30))
    assert (again.pruned, again.forgotten) == (0, 0)


def test_a_repeated_create_of_a_pruned_key_is_refused_and_runs_nothing(
    services: Services, ops: OpsClient, clock: ManualClock, operator_md: Metadata
) -> None:
    pruned = _succeed(ops, ALICE, "k-pruned")
    clock.advance(40 * DAY)
    assert _prune(services, operator_md, timedelta(days=30)).pruned == 1
    before = ops.state_counts()

    refused = expect_failure(lambda: ops.create(ALICE, "k-pruned"), EXISTS, "operation_pruned")
    finished_on = (clock() - timedelta(days=40)).date().isoformat()
    assert f"finished on {finished_on} (succeeded)" in refused.details
    assert "removed" in refused.details
    # The same key for another request is the usual conflict; nothing is created either way.
    expect_failure(
        lambda: ops.create(ALICE, "k-pruned", subject_id="job-2"), EXISTS, "idempotency_conflict"
    )
    assert ops.state_counts() == before
    assert ops.claim() is None
    # The key is the owner's: another owner's same key runs.
    assert ops.create(BOB, "k-pruned").id != pruned


def test_tombstones_past_their_own_horizon_are_forgotten_and_free_the_key(
    services: Services, ops: OpsClient, clock: ManualClock, operator_md: Metadata
) -> None:
    _succeed(ops, ALICE, "k-forgotten")
    clock.advance(10 * DAY)
    _succeed(ops, ALICE, "k-remembered")
    clock.advance(25 * DAY)
    # The first finished 35 days ago, past both horizons: its tombstone goes at once.
    answer = _prune(services, operator_md, timedelta(days=20), timedelta(days=30))
    assert (answer.pruned, answer.forgotten) == (2, 1)
    assert [row.idempotency_key for row in _tombstones(services).values()] == ["k-remembered"]
    clock.advance(6 * DAY)
    answer = _prune(services, operator_md, timedelta(days=20), timedelta(days=30))
    assert (answer.pruned, answer.forgotten) == (0, 1)
    assert _tombstones(services) == {}
    assert ops.create(ALICE, "k-forgotten").id  # free again: a new operation
    assert ops.create(ALICE, "k-remembered").id


def test_prune_works_in_bounded_batches_and_stops_at_its_time_limit(
    services: Services, ops: OpsClient, clock: ManualClock, operator_md: Metadata
) -> None:
    ids = [ops.cancel(ALICE, ops.create(ALICE, f"k-batch-{n}").id).id for n in range(7)]
    clock.advance(2 * DAY)
    policy = RetentionPolicy(timedelta(days=1), timedelta(days=10))

    def batch(limit: int) -> int:
        return services.db.run(
            lambda tx: retention.prune_batch(OperatorTx(tx), policy, clock(), limit).pruned,
            owner_id=None,
        )

    assert [batch(3), batch(3)] == [3, 3]  # never more than the batch, one transaction each
    # Out of time after its first full batch: it says there is more.
    cut_short = services.loop.call(prune(services.db, clock, policy, 1, seconds=0))
    assert (cut_short.pruned, cut_short.more) == (1, True)
    assert set(_tombstones(services)) == set(ids)
    answer = _prune(services, operator_md, timedelta(days=1), batch_size=2)
    assert (answer.pruned, answer.more) == (0, False)


def test_the_periodic_prune_runs_in_the_operations_process(
    services: Services, ops: OpsClient, clock: ManualClock
) -> None:
    old = _succeed(ops, BOB, "k-periodic")
    clock.advance(8 * DAY)
    policy = RetentionPolicy(timedelta(days=7), timedelta(days=30))

    async def one_round(logs: list[MutableMapping[str, Any]]) -> None:
        pruner = asyncio.create_task(run_pruner(services.db, clock, policy, 100))
        for _ in range(400):  # bounded: a broken build fails here instead of hanging
            if any(entry["event"] == "retention_pruned" for entry in logs):
                break
            await asyncio.sleep(0.05)
        pruner.cancel()

    with capture_logs() as logs:
        services.loop.call(one_round(logs))
    assert not ops_row_exists(services, old)
    assert set(_tombstones(services)) == {old}
    assert [(e["pruned"], e["forgotten"]) for e in logs if e["event"] == "retention_pruned"] == [
        (1, 0)
    ]


def test_prune_refuses_bad_requests_and_other_credentials(
    services: Services, ops: OpsClient, operator_md: Metadata
) -> None:
    operator = services.operator
    expect_failure(
        lambda: operator.PruneOperations(opb.PruneOperationsRequest(), metadata=operator_md),
        INVALID,
        field="older_than",
    )
    expect_failure(
        lambda: _prune(services, operator_md, timedelta(days=30), timedelta(days=7)),
        INVALID,
        field="tombstones_older_than",
    )
    expect_failure(
        lambda: _prune(services, operator_md, timedelta(days=30), batch_size=5001),
        INVALID,
        field="batch_size",
    )
    expect_failure(lambda: _prune(services, operator_md, timedelta(0)), INVALID)
    for md in (ops.gateway(ALICE), ops.neutral, metadata(Role.GATEWAY)):
        expect_failure(
            lambda md=md: _prune(services, md, timedelta(days=1)),  # type: ignore[misc]
            grpc.StatusCode.PERMISSION_DENIED,
        )


def test_opsctl_operations_prune_with_nothing_to_prune_says_so_and_asks_nothing(
    ops: OpsClient, clock: ManualClock, opsctl: Callable[..., tuple[int, str, str]]
) -> None:
    """As a cancel by a filter that matches nothing: no plan to confirm, exit 0."""
    _succeed(ops, ALICE, "k-cli-recent")
    clock.advance(DAY)

    code, said, err = opsctl("prune", "--older-than", "30d")
    assert (code, err) == (0, "")
    assert said.startswith("nothing to prune: no operation finished before ")
    assert " and no tombstone of one finished before " in said
    code, out, err = opsctl("prune", "--older-than", "30d", "--json")
    assert (code, err) == (0, "")
    summary = json.loads(out)
    assert (summary["dry_run"], summary["pruned"], summary["forgotten"]) == (True, 0, 0)
    assert opsctl("prune", "--older-than", "30d", "--yes") == (0, said, "")


def test_opsctl_operations_prune_counts_then_prunes_with_yes(
    services: Services,
    ops: OpsClient,
    clock: ManualClock,
    opsctl: Callable[..., tuple[int, str, str]],
) -> None:
    done = _succeed(ops, ALICE, "k-cli-prune")
    clock.advance(31 * DAY)

    code, out, err = opsctl("prune", "--older-than", "30d")
    assert code == EXIT_NOT_CONFIRMED
    assert "would prune 1 operations" in out
    assert "--yes" in err
    assert ops_row_exists(services, done)

    code, out, _ = opsctl("prune", "--older-than", "30d", "--yes", "--json")
    assert code == 0
    summary = json.loads(out)
    assert (summary["dry_run"], summary["pruned"], summary["forgotten"]) == (False, 1, 0)
    assert not ops_row_exists(services, done)

    code, _, err = opsctl("prune", "--older-than", "30d", "--tombstones-older-than", "7d", "--yes")
    assert code == 2  # the service's rule, applied before the call
    assert "tombstones_older_than" in err
    for usage in (["--older-than", "soon"], ["--yes"]):  # argparse refuses these itself
        with pytest.raises(SystemExit) as refused:
            opsctl("prune", *usage)
        assert refused.value.code == 2


def _prune_batch(
    services: Services, policy: RetentionPolicy, now: datetime, limit: int
) -> retention.PruneBatch:
    """One batch, as a prune runs it, in its own transaction."""
    return services.db.run(
        lambda tx: retention.prune_batch(OperatorTx(tx), policy, now, limit), owner_id=None
    )


def _prunable(services: Services, policy: RetentionPolicy, now: datetime) -> retention.Prunable:
    return services.db.run(
        lambda tx: retention.prunable(OperatorTx(tx), policy, now), owner_id=None
    )


def test_an_operation_finished_exactly_at_the_horizon_is_kept_and_so_is_its_tombstone(
    services: Services, ops: OpsClient
) -> None:
    """An operation is "kept ``operations`` long after it finished" (ADR 0021): at the
    horizon's very instant its record is still kept (and not counted), and its tombstone
    likewise at its own horizon; a microsecond later each goes."""
    done = _succeed(ops, ALICE, "k-at-the-horizon")
    stored = operation(services.db, done)
    assert stored is not None
    assert stored.finished_at is not None
    policy = RetentionPolicy(timedelta(days=1), timedelta(days=2))
    tick = timedelta(microseconds=1)

    at_horizon = stored.finished_at + policy.operations
    assert _prunable(services, policy, at_horizon) == retention.Prunable(0, 0)
    assert _prune_batch(services, policy, at_horizon, 10) == retention.PruneBatch(0, 0)
    assert _prunable(services, policy, at_horizon + tick) == retention.Prunable(1, 0)
    assert _prune_batch(services, policy, at_horizon + tick, 10) == retention.PruneBatch(1, 0)

    at_tombstone_horizon = stored.finished_at + policy.tombstones
    assert _prunable(services, policy, at_tombstone_horizon) == retention.Prunable(0, 0)
    assert _prune_batch(services, policy, at_tombstone_horizon, 10) == retention.PruneBatch(0, 0)
    assert set(_tombstones(services)) == {done}
    assert _prune_batch(services, policy, at_tombstone_horizon + tick, 10) == (
        retention.PruneBatch(0, 1)
    )
    assert _tombstones(services) == {}


def test_a_dry_run_counts_tombstones_by_their_own_horizon(
    services: Services, ops: OpsClient, clock: ManualClock, operator_md: Metadata
) -> None:
    """What a dry run says is what the prune then does: tombstones are counted past
    ``tombstones_older_than``, not past the operations' shorter horizon."""
    _succeed(ops, ALICE, "k-dry-older")
    clock.advance(10 * DAY)
    _succeed(ops, ALICE, "k-dry-newer")
    clock.advance(25 * DAY)  # finished 35 and 25 days ago
    assert _prune(services, operator_md, timedelta(days=20), timedelta(days=40)).pruned == 2

    dry = _prune(services, operator_md, timedelta(days=20), timedelta(days=30), dry_run=True)
    assert (dry.pruned, dry.forgotten, dry.more) == (0, 1, False)
    assert len(_tombstones(services)) == 2  # a dry run forgets nothing
    answer = _prune(services, operator_md, timedelta(days=20), timedelta(days=30))
    assert (answer.pruned, answer.forgotten) == (0, 1)
    assert [row.idempotency_key for row in _tombstones(services).values()] == ["k-dry-newer"]


def test_a_pruned_key_is_refused_only_within_its_own_task_type(
    services: Services, ops: OpsClient, clock: ManualClock, operator_md: Metadata
) -> None:
    """Owner, task type and key name an operation together: a pruned key of one task type
    leaves the same key of another free, and each refusal tells of its own operation."""
    _succeed(ops, ALICE, "k-shared")
    clock.advance(40 * DAY)
    assert _prune(services, operator_md, timedelta(days=30)).pruned == 1

    other = ops.create(ALICE, "k-shared", task_type=OTHER_TASK)  # runs: another task type
    ops.cancel(ALICE, other.id)
    expect_failure(lambda: ops.create(ALICE, "k-shared"), EXISTS, "operation_pruned")
    clock.advance(40 * DAY)
    assert _prune(services, operator_md, timedelta(days=30), timedelta(days=90)).pruned == 1

    # Both task types now hold a tombstone of the key; each create reads only its own.
    cancelled = expect_failure(
        lambda: ops.create(ALICE, "k-shared", task_type=OTHER_TASK), EXISTS, "operation_pruned"
    )
    assert "(cancelled)" in cancelled.details
    succeeded = expect_failure(lambda: ops.create(ALICE, "k-shared"), EXISTS, "operation_pruned")
    assert "(succeeded)" in succeeded.details
    # The first tombstone is forgotten (80 days): its task type's key is free, the other not.
    assert _prune(services, operator_md, timedelta(days=30), timedelta(days=60)).forgotten == 1
    assert ops.create(ALICE, "k-shared").id
    expect_failure(
        lambda: ops.create(ALICE, "k-shared", task_type=OTHER_TASK), EXISTS, "operation_pruned"
    )


def test_a_prune_goes_on_while_batches_come_back_full_and_stops_at_the_first_short_one(
    services: Services, ops: OpsClient, clock: ManualClock
) -> None:
    """Without a time limit a prune takes everything past the horizons, batch after batch;
    a full batch of forgotten tombstones counts as full as one of pruned operations."""
    ids = {ops.cancel(BOB, ops.create(BOB, f"k-full-{n}").id).id for n in range(5)}
    clock.advance(2 * DAY)
    policy = RetentionPolicy(timedelta(days=1), timedelta(days=10))

    everything = services.loop.call(prune(services.db, clock, policy, 2))
    assert (everything.pruned, everything.forgotten, everything.more) == (5, 0, False)
    assert set(_tombstones(services)) == ids
    clock.advance(10 * DAY)
    # Each batch forgets at most its size, whatever the final state of the operation.
    assert _prune_batch(services, policy, clock(), 2) == retention.PruneBatch(0, 2)
    rest = services.loop.call(prune(services.db, clock, policy, 2))
    assert (rest.pruned, rest.forgotten, rest.more) == (0, 3, False)
    assert _tombstones(services) == {}


def test_a_batch_takes_the_oldest_first(
    services: Services, ops: OpsClient, clock: ManualClock
) -> None:
    """Oldest first, operations and tombstones alike: a prune cut short by its time limit
    leaves the most recent behind, the ones nearest to being kept anyway."""
    older, newer = (ops.create(ALICE, key).id for key in ("k-older", "k-newer"))
    ops.cancel(ALICE, older)
    clock.advance(DAY)
    ops.cancel(ALICE, newer)
    clock.advance(2 * DAY)
    policy = RetentionPolicy(timedelta(days=1), timedelta(days=10))

    assert _prune_batch(services, policy, clock(), 1) == retention.PruneBatch(1, 0)
    assert set(_tombstones(services)) == {older}
    assert _prune_batch(services, policy, clock(), 1) == retention.PruneBatch(1, 0)
    clock.advance(9 * DAY)  # both tombstones past their horizon now
    assert _prune_batch(services, policy, clock(), 1) == retention.PruneBatch(0, 1)
    assert set(_tombstones(services)) == {newer}


def test_a_prune_counts_what_it_removed_in_the_operations_metrics(
    services: Services, ops: OpsClient, clock: ManualClock
) -> None:
    """``durable_ops_operations_pruned_total`` and ``..._tombstones_forgotten_total`` add up
    every batch of a prune, so a dashboard sees what retention removed."""
    registry = CollectorRegistry()
    metrics = OperationsMetrics(registry, services.db, clock)
    for n in range(3):
        _succeed(ops, ALICE, f"k-metered-{n}")
    clock.advance(2 * DAY)
    policy = RetentionPolicy(timedelta(days=1), timedelta(days=3))

    services.loop.call(prune(services.db, clock, policy, 2, metrics=metrics))
    clock.advance(2 * DAY)
    services.loop.call(prune(services.db, clock, policy, 2, metrics=metrics))
    assert registry.get_sample_value("durable_ops_operations_pruned_total") == 3
    assert registry.get_sample_value("durable_ops_tombstones_forgotten_total") == 3


def test_deleting_another_owners_operation_is_not_found_by_its_stable_code(
    services: Services, ops: OpsClient, clock: ManualClock
) -> None:
    """Another owner's operation is as unknown as a missing one, with the code every other
    operation call answers (``operation_not_found``), and it stays."""
    theirs = ops.cancel(ALICE, ops.create(ALICE, "k-theirs").id).id

    def delete(operation_id: str) -> None:
        services.db.run(
            lambda tx: retention.delete_finished(tx, operation_id, clock(), lambda _: None),
            owner_id=BOB,
        )

    for unknown in (theirs, "no-such-operation"):
        with pytest.raises(NotFound) as refused:
            delete(unknown)
        assert refused.value.code == "operation_not_found"
    assert ops_row_exists(services, theirs)
    assert _tombstones(services) == {}


class _ClockFailingOnce:
    """The clock of a pruner whose first run fails (as on a database hiccup), then reads
    the test's clock."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.failed = False

    def __call__(self) -> datetime:
        if not self.failed:
            self.failed = True
            raise OSError("the first run fails")
        return self.clock()


def test_the_periodic_prune_outlives_a_failed_run_and_tries_again(
    services: Services, ops: OpsClient, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed run is logged and the next interval runs again: the Operations process
    keeps pruning after a hiccup."""
    old = _succeed(ops, BOB, "k-after-a-hiccup")
    clock.advance(8 * DAY)
    policy = RetentionPolicy(timedelta(days=7), timedelta(days=30))
    monkeypatch.setattr(pruner, "TUNING", Tuning(retention_interval_seconds=0.01))

    async def until_pruned(logs: list[MutableMapping[str, Any]]) -> None:
        running = asyncio.create_task(
            pruner.run_pruner(services.db, _ClockFailingOnce(clock), policy, 100)
        )
        for _ in range(400):  # bounded: a broken build fails here instead of hanging
            if running.done() or any(entry["event"] == "retention_pruned" for entry in logs):
                break
            await asyncio.sleep(0.05)
        running.cancel()

    with capture_logs() as logs:
        services.loop.call(until_pruned(logs))
    events = [(e["event"], e.get("error")) for e in logs if e["event"].startswith("retention_")]
    assert events == [("retention_prune_failed", "OSError"), ("retention_pruned", None)]
    assert not ops_row_exists(services, old)


def test_a_prune_goes_on_while_idle_concurrency_slots_fill_its_batches(
    db_url: str, clock: ManualClock
) -> None:
    """With retention off the periodic run still deletes idle slot rows (a row per key that
    ever ran): a full batch of them is followed by another, as with operations."""
    keyed = "fleet.keyed"
    with running_services(db_url, clock, concurrency={keyed: Concurrency(per_key=1)}) as running:
        ops = OpsClient(running)
        for key in ("s0", "s1", "s2"):  # three keys that ran once and are idle now
            request = ops.create_request(f"k-slot-{key}", task_type=keyed, subject_id=key)
            ops.create_raw(ALICE, request)
            ops.complete(ops.claim_one((keyed,)))
        assert len(rows(running.db, select(ConcurrencySlot))) > 2
        running.loop.call(prune(running.db, clock, None, 2))
        assert rows(running.db, select(ConcurrencySlot)) == []


def test_a_delete_racing_a_retry_goes_wholly_before_it(
    services: Services, ops: OpsClient, clock: ManualClock, engine_name: str
) -> None:
    """A retry of the operation a delete has read waits for the delete, then finds nothing
    to retry. Read unlocked, the delete's DELETE missed the row the retry had queued again
    (its tombstone INSERT failed first): the owner's Delete answered INTERNAL."""
    if engine_name == "sqlite":
        pytest.skip("SQLite runs one writer at a time: the retry cannot start inside the delete")
    failed = _fail(ops, ALICE, "k-retried-meanwhile")
    retried: list[str] = []

    def retry_in_its_own_transaction() -> None:
        try:
            services.db.run(lambda tx: operations.retry(tx, failed, clock()), owner_id=ALICE)
            retried.append("queued again")
        except NotFound as gone:
            retried.append(gone.code)

    racer = threading.Thread(target=retry_in_its_own_transaction)

    def retried_meanwhile(_task_type: str) -> None:  # between the delete's read and its DELETE
        racer.start()
        # A retry free to run commits well within this; one the delete locks out waits for it.
        racer.join(timeout=1.0)

    services.db.run(
        lambda tx: retention.delete_finished(tx, failed, clock(), retried_meanwhile),
        owner_id=ALICE,
    )
    racer.join()
    assert retried == ["operation_not_found"]
    assert set(_tombstones(services)) == {failed}
    assert not ops_row_exists(services, failed)


def test_opsctl_operations_prune_with_only_tombstones_to_forget_asks_first(
    services: Services,
    ops: OpsClient,
    clock: ManualClock,
    opsctl: Callable[..., tuple[int, str, str]],
) -> None:
    """Forgetting a tombstone frees its key for a new create: as destructive as a prune,
    so a plan with nothing but tombstones in it stops too (exit 6) and forgets nothing."""
    _succeed(ops, ALICE, "k-cli-tombstone")
    clock.advance(31 * DAY)
    assert opsctl("prune", "--older-than", "30d", "--tombstones-older-than", "60d", "--yes")[0] == 0
    clock.advance(30 * DAY)

    code, out, err = opsctl("prune", "--older-than", "30d", "--tombstones-older-than", "60d")
    assert code == EXIT_NOT_CONFIRMED
    assert "would prune 0 operations" in out
    assert "forget 1 tombstones" in out
    assert "--yes" in err
    assert len(_tombstones(services)) == 1


def test_opsctl_operations_prune_calls_again_while_the_service_says_there_is_more(
    services: Services,
    ops: OpsClient,
    clock: ManualClock,
    opsctl: Callable[..., tuple[int, str, str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A call stops at its time limit with ``more``; the command calls until there is none."""
    monkeypatch.setattr(retention_rules, "PRUNE_CALL_SECONDS", 0.0)  # one batch per call
    done = [_succeed(ops, ALICE, f"k-cli-more-{n}") for n in range(3)]
    clock.advance(31 * DAY)
    code, out, _ = opsctl("prune", "--older-than", "30d", "--batch-size", "1", "--yes", "--json")
    assert code == 0
    assert json.loads(out)["pruned"] == 3
    assert not any(ops_row_exists(services, operation_id) for operation_id in done)
