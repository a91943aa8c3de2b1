"""Per-key and global concurrency limits (issue 37 point 3, ADR 0048), both engines.

The claim never starts more operations of a limited type than its limits allow, per
owner's key and in all: checked claim by claim, and under 8 SDK workers on two
replicas, where a sampler reads the running counts from the database itself while
the workers run. A type without limits costs a claim no statement more.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import func, select

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.clock import utc_now
from durable_ops.model.concurrency_limits import Concurrency
from durable_ops.model.scope import Role
from durable_ops.operations import pruner
from durable_ops.storage import operations
from durable_ops.storage.db import Database
from durable_ops.storage.operations import claims, slots
from durable_ops.storage.schema import ConcurrencySlot, UserOperation
from durable_ops.worker import Attempt, Worker, WorkerOptions
from tests.support.clock import ManualClock
from tests.support.grpc_services import Services, running_services
from tests.support.keys import signing_key
from tests.support.operations_client import ALICE, BOB, TASK, Lease, OpsClient
from tests.support.stored import rows

KEYED = "fleet.keyed"  # at most 2 at once per owner's key
CAPPED = "fleet.capped"  # at most 3 at once in all
LIMITS = {KEYED: Concurrency(per_key=2), CAPPED: Concurrency(total=3)}
BOTH = "fleet.both"
SINGLE = "fleet.single"  # at most 1 at once per owner's key
HANG_GUARD = 60.0
FILL_WAIT = 1.0


@pytest.fixture
def services(db_url: str, clock: ManualClock) -> Iterator[Services]:
    limits = {**LIMITS, BOTH: Concurrency(per_key=2, total=3), SINGLE: Concurrency(per_key=1)}
    with running_services(db_url, clock, concurrency=limits) as running:
        yield running


def _create(ops: OpsClient, owner: str, key: str, task_type: str, n: int) -> str:
    request = ops.create_request(f"{task_type}-{key}-{n}", task_type=task_type, subject_id=key)
    return ops.create_raw(owner, request).operation.id


def _claim_batch(ops: OpsClient, task_type: str | tuple[str, ...], count: int) -> list[Lease]:
    types = [task_type] if isinstance(task_type, str) else list(task_type)
    response: pb.ClaimOperationsResponse = ops.stub.ClaimOperations(
        pb.ClaimOperationsRequest(task_types=types, lease_seconds=30, max_operations=count),
        metadata=ops.neutral,
    )
    return [
        Lease(claimed.operation, claimed.owner_id, claimed.lease_token)
        for claimed in response.claimed
    ]


def _slots(services: Services) -> dict[str, int]:
    found = rows(services.db, select(ConcurrencySlot.id, ConcurrencySlot.running))
    return {row.id: row.running for row in found if row.running}  # a slot left at 0 stays


def test_a_claim_starts_no_more_than_the_key_and_the_type_allow(
    services: Services, ops: OpsClient, clock: ManualClock
) -> None:
    def create(owner: str, key: str, n: int) -> str:
        clock.advance(1)  # one queue order, whatever the ids drawn
        return _create(ops, owner, key, BOTH, n)

    alice_a = [create(ALICE, "a", n) for n in range(3)]
    bob_a = create(BOB, "a", 0)  # bob's "a" is a key of bob's
    alice_b = create(ALICE, "b", 0)
    claimed = _claim_batch(ops, BOTH, 10)
    # In turn (ADR 0049): bob's first before alice's second; alice's third waits for her
    # key, alice's "b" for the type.
    assert [lease.id for lease in claimed] == [alice_a[0], bob_a, alice_a[1]]
    assert ops.claim((BOTH,)) is None  # the type is full
    assert _slots(services) == {f"{BOTH}|": 3, f"{BOTH}|{ALICE}/a": 2, f"{BOTH}|{BOB}/a": 1}

    ops.complete(claimed[0])  # alice's a and the type each have room for one
    assert ops.claim_one((BOTH,)).id == alice_a[2]  # the queue's order, within the limits
    assert ops.claim((BOTH,)) is None
    for lease in claimed[1:]:
        ops.fail(lease, retryable=False)
    assert ops.claim_one((BOTH,)).id == alice_b
    assert _slots(services)[f"{BOTH}|"] == 2


def test_every_end_of_a_run_gives_its_slots_back(
    services: Services, ops: OpsClient, clock: ManualClock
) -> None:
    ids = [_create(ops, ALICE, "k", KEYED, n) for n in range(2)]
    held = [ops.claim_one((KEYED,)), ops.claim_one((KEYED,))]
    assert ops.claim((KEYED,)) is None
    _create(ops, ALICE, "k", KEYED, 2)
    assert ops.claim((KEYED,)) is None  # the key is full
    ops.fail(held[0], retryable=True)  # waiting for retry: the slot is free
    third = ops.claim_one((KEYED,), lease_seconds=600)
    assert third.id not in ids
    clock.advance(60)  # held[1]'s lease runs out, and held[0]'s retry is due
    services.sweep()
    assert _slots(services)[f"{KEYED}|{ALICE}/k"] == 1  # third's only
    assert ops.claim_one((KEYED,)).id in ids
    assert ops.claim((KEYED,)) is None


def test_a_type_limited_only_in_total_gets_its_room_back_at_each_end(
    services: Services, ops: OpsClient
) -> None:
    for n in range(4):
        _create(ops, ALICE, f"c{n}", CAPPED, n)
    held = _claim_batch(ops, CAPPED, 4)
    assert len(held) == 3
    ops.complete(held[0])
    assert _slots(services) == {f"{CAPPED}|": 2}
    assert ops.claim((CAPPED,)) is not None


def test_a_full_key_holds_back_only_its_own_operations(services: Services, ops: OpsClient) -> None:
    k = [_create(ops, ALICE, "k", SINGLE, n) for n in range(2)]
    other_key = _create(ops, ALICE, "m", SINGLE, 0)
    assert ops.claim_one((SINGLE,)).id == k[0]
    # k's backlog, ahead in the queue, is not even a candidate: it would fill the claim
    # of one and be refused, and a key with room would wait behind it.
    assert ops.claim_one((SINGLE,)).id == other_key


def test_the_concurrency_key_names_the_slot_whatever_the_subject(
    services: Services, ops: OpsClient
) -> None:
    def create(n: int, key: str) -> str:
        request = ops.create_request(f"ck-{n}", task_type=SINGLE, subject_id=f"subject-{n}")
        request.concurrency_key = key
        return ops.create_raw(ALICE, request).operation.id

    k = [create(0, "k"), create(1, "k")]
    other_key = create(2, "m")
    assert ops.claim_one((SINGLE,)).id == k[0]
    # k's second waits for its key though its subject is another, and is not a candidate
    # that would take the claim's one place.
    assert ops.claim_one((SINGLE,)).id == other_key
    assert ops.claim((SINGLE,)) is None
    assert _slots(services) == {f"{SINGLE}|": 2, f"{SINGLE}|{ALICE}/k": 1, f"{SINGLE}|{ALICE}/m": 1}


def test_a_claim_of_several_types_takes_the_unlimited_beside_the_limited(
    services: Services, ops: OpsClient
) -> None:
    free = ops.create(ALICE, "free").id  # TASK: no limits
    keyed = _create(ops, ALICE, "k", KEYED, 0)
    claimed = _claim_batch(ops, (TASK, KEYED), 10)
    assert sorted(lease.id for lease in claimed) == sorted([free, keyed])


def test_a_full_type_holds_back_no_other_type_in_the_same_claim(
    services: Services, ops: OpsClient
) -> None:
    for n in range(3):
        _create(ops, ALICE, f"c{n}", CAPPED, n)
    assert len(_claim_batch(ops, CAPPED, 3)) == 3  # the type is full
    _create(ops, ALICE, "c3", CAPPED, 3)  # ahead in the queue, and waits for the type
    free = ops.create(ALICE, "free").id
    assert ops.claim_one((CAPPED, TASK)).id == free


def test_a_full_keys_backlog_wakes_no_waiting_claim(services: Services, ops: OpsClient) -> None:
    kinds = {("queued", SINGLE)}

    def poll() -> set[tuple[str, str]]:
        now = services.clock()
        return services.db.run(lambda tx: operations.claimable_kinds(tx, now, kinds), owner_id=None)

    for n in range(2):
        _create(ops, ALICE, "k", SINGLE, n)
    assert poll() == kinds
    ops.claim_one((SINGLE,))
    assert poll() == set()  # the second waits for its key: no claim could take it


def test_each_end_of_a_cancelled_run_gives_its_slots_back(
    services: Services, ops: OpsClient, clock: ManualClock
) -> None:
    def release(lease: Lease) -> None:
        item = pb.SettleOperationsRequest.Item(owner_id=lease.owner)
        item.release.operation_id, item.release.lease_token = lease.id, lease.token
        reply = ops.stub.SettleOperations(
            pb.SettleOperationsRequest(items=[item]), metadata=ops.neutral
        )
        assert not reply.outcomes[0].status_code, reply.outcomes[0].error_code

    def lease_runs_out(_lease: Lease) -> None:
        clock.advance(60)
        services.sweep()

    for n, end in enumerate((ops.acknowledge_cancel, release, lease_runs_out)):
        _create(ops, ALICE, "k", SINGLE, n)  # claimable only if the last run gave its key back
        lease = ops.claim_one((SINGLE,))
        ops.cancel(ALICE, lease.id)
        end(lease)
        assert (ops.row(lease.id).state, _slots(services)) == ("cancelled", {})


def test_the_prune_deletes_idle_slots_and_the_limits_hold_after_it(
    services: Services, ops: OpsClient
) -> None:
    def prune() -> None:  # as the Operations process does hourly, retention off (the default)
        services.loop.call(pruner.prune(services.db, services.clock, None, batch_size=100))

    def slot_rows() -> dict[str, int]:
        return {row.id: row.running for row in rows(services.db, select(ConcurrencySlot))}

    for key in ("s0", "s1"):  # two keys that ran once and are idle now
        _create(ops, ALICE, key, KEYED, 0)
        ops.complete(ops.claim_one((KEYED,)))
    held = []
    for n in range(2):
        _create(ops, ALICE, "k", KEYED, n)
        held.append(ops.claim_one((KEYED,)))
    assert f"{KEYED}|{ALICE}/s0" in slot_rows()
    prune()
    assert slot_rows() == {f"{KEYED}|": 2, f"{KEYED}|{ALICE}/k": 2}  # the idle keys' are gone
    _create(ops, ALICE, "k", KEYED, 2)
    assert ops.claim((KEYED,)) is None  # the held key is still counted
    for lease in held:
        ops.complete(lease)
    prune()
    assert slot_rows() == {}
    for n in range(3, 5):
        _create(ops, ALICE, "k", KEYED, n)
    assert [ops.claim((KEYED,)) is not None for _ in range(3)] == [True, True, False]
    assert slot_rows()[f"{KEYED}|{ALICE}/k"] == 2  # the key's row came back and counts


def test_a_slot_a_claim_took_while_the_prune_read_it_idle_is_kept(
    services: Services, ops: OpsClient, db_url: str, engine_name: str
) -> None:
    """The prune reads idle slots unlocked, then deletes them: a claim that commits between
    the two must keep its count, or the key would run one more than its limit after."""
    if engine_name == "sqlite":
        pytest.skip("SQLite runs one writer at a time: no claim commits inside the prune")
    _create(ops, ALICE, "k", KEYED, 0)
    ops.complete(ops.claim_one((KEYED,)))  # the key's slot is idle now
    _create(ops, ALICE, "k", KEYED, 1)
    claimed: list[Lease] = []

    def claim_meanwhile(*args: Any) -> None:  # just before the prune's DELETE
        if str(args[2]).upper().startswith("DELETE") and not claimed:
            racer = threading.Thread(target=lambda: claimed.append(ops.claim_one((KEYED,))))
            racer.start()
            racer.join(HANG_GUARD)

    pruning = Database(db_url, pool_size=1)
    pruning.listen("before_cursor_execute", claim_meanwhile)
    try:
        pruning.run(lambda tx: slots.prune_idle(tx, 100), owner_id=None)
    finally:
        pruning.dispose()
    assert len(claimed) == 1
    assert _slots(services) == {f"{KEYED}|": 1, f"{KEYED}|{ALICE}/k": 1}


def test_a_type_without_limits_costs_a_claim_no_statement_more(
    services: Services, ops: OpsClient, clock: ManualClock
) -> None:
    for n in range(3):
        ops.create(ALICE, f"free-{n}")
        _create(ops, ALICE, f"k{n}", KEYED, n)
    statements: list[str] = []
    lock = threading.Lock()

    def count(*args: Any) -> None:
        with lock:
            statements.append(str(args[2]))

    def claimed(task_type: str) -> int:
        statements.clear()
        services.db.listen("before_cursor_execute", count)
        try:
            taken = services.db.run(
                lambda tx: operations.claim(tx, [task_type], 30, clock(), limit=3, limits=LIMITS),
                owner_id=None,
            )
        finally:
            services.db.unlisten("before_cursor_execute", count)
        assert len(taken) == 3
        return len([text for text in statements if not text.upper().startswith(_FRAMING)])

    assert claimed(TASK) == 3  # SELECT … FOR UPDATE, UPDATE, INSERT of the attempts
    assert claimed(KEYED) == 3 + 3  # and the slots: INSERT IGNORE, SELECT … FOR UPDATE, UPDATE


_FRAMING = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "SET ", "SELECT 1")


# ---- 8 SDK workers on two replicas ------------------------------------------------------------


class _Sampler:
    """Reads, from the database, how many operations run at once per key and per type."""

    def __init__(self, services: Services) -> None:
        self._services = services
        self.max_per_key: Counter[tuple[str, str, str]] = Counter()
        self.max_per_type: Counter[str] = Counter()
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(HANG_GUARD)

    def _run(self) -> None:
        ops = UserOperation
        key = func.coalesce(ops.concurrency_key, ops.subject_id)
        query = (
            select(ops.task_type, ops.owner_user_id, key.label("key"), func.count())
            .where(ops.state == "running")
            .group_by(ops.task_type, ops.owner_user_id, key)
        )
        while not self._stop.is_set():
            found = rows(self._services.db, query)
            per_type: Counter[str] = Counter()
            for task_type, owner, key_name, running in found:
                slot = (task_type, owner, key_name)
                self.max_per_key[slot] = max(self.max_per_key[slot], running)
                per_type[task_type] += running
            for task_type, running in per_type.items():
                self.max_per_type[task_type] = max(self.max_per_type[task_type], running)
            self.samples += 1
            time.sleep(0.002)


def test_no_limit_is_exceeded_under_eight_workers_on_two_replicas(db_url: str) -> None:
    with (
        running_services(db_url, utc_now, concurrency=LIMITS) as first,
        running_services(db_url, utc_now, concurrency=LIMITS) as second,
    ):
        ops = OpsClient(first)
        keys = [(owner, key) for owner in (ALICE, BOB) for key in ("a", "b", "c")]
        for n in range(5):
            for owner, key in keys:
                _create(ops, owner, key, KEYED, n)
        for n in range(12):
            _create(ops, (ALICE, BOB)[n % 2], f"s{n}", CAPPED, n)
        total = 5 * len(keys) + 12
        in_handlers: Counter[tuple[str, str, str]] = Counter()
        max_in_handlers: Counter[tuple[str, str, str]] = Counter()
        workers = [
            Worker(
                (first, second)[n % 2].target,
                signing_key(Role.WORKER),
                WorkerOptions(concurrency=4, batch_size=4, claim_gather_seconds=0),
            )
            for n in range(8)
        ]

        async def run(attempt: Attempt) -> None:
            slot, limit = (attempt.task_type, attempt.owner_id, attempt.subject.id), 2
            if attempt.task_type == CAPPED:
                slot, limit = (CAPPED, "", ""), 3
            in_handlers[slot] += 1
            max_in_handlers[slot] = max(max_in_handlers[slot], in_handlers[slot])
            try:
                # A handler waits a while for its slot to fill, so that the check below
                # that the limits are reached does not depend on how fast a loaded
                # machine claims: a limit stricter than configured still fails it.
                waited = asyncio.get_running_loop().time() + FILL_WAIT
                while in_handlers[slot] < limit and asyncio.get_running_loop().time() < waited:
                    await asyncio.sleep(0.005)
                await asyncio.sleep(0.03)
            finally:
                in_handlers[slot] -= 1

        for worker in workers:
            worker.handler(KEYED)(run)
            worker.handler(CAPPED)(run)

        async def all_done() -> None:
            running = [asyncio.create_task(worker.run()) for worker in workers]
            try:
                async with asyncio.timeout(HANG_GUARD):
                    while sum(worker.completed for worker in workers) < total:
                        await asyncio.sleep(0.02)
            finally:
                for worker in workers:
                    worker.stop()
                async with asyncio.timeout(HANG_GUARD):
                    await asyncio.gather(*running)

        with _Sampler(first) as sampler:
            asyncio.run(all_done())

        assert ops.state_counts() == {"succeeded": total}
        assert sampler.samples > 10
        assert max(sampler.max_per_key[(KEYED, o, k)] for o, k in keys) <= 2
        assert sampler.max_per_type[CAPPED] <= 3
        # The handlers ran as many at once as the limits allow, and never more.
        assert max(max_in_handlers[(KEYED, o, k)] for o, k in keys) == 2
        assert max_in_handlers[(CAPPED, "", "")] == 3
        assert _slots(first) == {}  # every slot given back


def test_the_galera_spread_keeps_the_limits_too(
    services: Services, ops: OpsClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On Galera the claim picks rows at random among the head (ADR 17); the slots are
    counted the same way after the pick."""
    monkeypatch.setattr(claims, "spreads", lambda _tx: True)
    for n in range(6):
        _create(ops, ALICE, "k", KEYED, n)
        _create(ops, BOB, f"s{n}", CAPPED, n)
    keyed = _claim_batch(ops, KEYED, 10)
    capped = _claim_batch(ops, CAPPED, 10)
    assert (len(keyed), len(capped)) == (2, 3)
    assert _slots(services) == {f"{KEYED}|": 2, f"{KEYED}|{ALICE}/k": 2, f"{CAPPED}|": 3}
    assert _claim_batch(ops, KEYED, 10) == []
