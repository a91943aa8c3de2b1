"""Fault schedules over the product on a namespaced Galera cluster, each checked from its history.

``python -m tests.partition.run [--full] [--schedules a,b] [--out DIR]`` (``scripts/jepsen.sh``):
a network, a cluster and the product are made once; each schedule then runs the
clients for its load time while it cuts and heals in rounds (calm, fault, heal),
heals for good, waits for every node to be Synced again, lets the workers drain,
reads the final rows through node 1 (causal reads) and prints the calls, their
outcomes and every checker count. Everything it made is removed at the end,
whatever happened (``harness``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import pymysql

from durable_ops.model.budgets import PRO_DAILY_TOKENS
from durable_ops.storage.db import GALERA_SYNC_WAIT
from tests.partition import checker
from tests.partition.cluster import DATABASE, Cluster
from tests.partition.history import Call, History
from tests.partition.load import (
    GLOBAL_DAILY_TOKENS,
    GLOBAL_LIMIT,
    USER_LIMIT,
    Load,
    Product,
)
from tests.partition.netns import Network

OWNERS = ("alice", "bob", "carol", "dave")
JOBS_PER_OWNER = 6


@dataclass
class Harness:
    network: Network
    cluster: Cluster
    product: Product


@contextmanager
def harness(tag: str = "dj0", prefix: str = "10.77.0", flush: int = 1) -> Iterator[Harness]:
    """The network, the cluster and the product; all of it removed on the way out."""
    network = Network(tag, prefix)
    cluster = Cluster(network, flush_log_at_trx_commit=flush)
    product = Product(cluster)
    try:
        network.up()
        cluster.start()
        product.start()
        yield Harness(network, cluster, product)
    finally:
        try:
            product.stop()
        finally:
            cluster.stop()
            network.down()
            cluster.remove()


@dataclass(frozen=True)
class Schedule:
    name: str
    fault: Callable[[Harness], None]
    heal: Callable[[Harness], None]
    sleepy_share: float = 0.0  # raw-worker attempts that stall past their lease
    shortest_fault: float = 0.0  # a process pause must outlive the lease


def _heal_network(h: Harness) -> None:
    h.network.heal()


def _kill_node(h: Harness) -> None:
    h.cluster.kill(3)


def _restart_node(h: Harness) -> None:
    if not h.cluster.alive(3):
        h.cluster.restart(3)


def _crash_every_node(h: Harness) -> None:
    for node in h.network.indexes:
        h.cluster.kill(node)


def _restart_every_node(h: Harness) -> None:
    if not any(h.cluster.alive(node) for node in h.network.indexes):
        h.cluster.restart_all()


def _pause_processes(h: Harness) -> None:
    h.product.pause("operations-0")
    h.product.pause("sdk-worker")


def _resume_processes(h: Harness) -> None:
    h.product.resume("operations-0")
    h.product.resume("sdk-worker")


SCHEDULES = {
    schedule.name: schedule
    for schedule in [
        Schedule("partition-1|2", lambda h: h.network.split([1], [2, 3]), _heal_network),
        Schedule("isolate-node", lambda h: h.network.isolate(2), _heal_network),
        Schedule("one-way", lambda h: h.network.one_way(1, 3), _heal_network),
        Schedule("packet-loss", lambda h: h.network.lose(0.2), _heal_network),
        Schedule("node-pause", lambda h: h.cluster.pause(2), lambda h: h.cluster.resume(2)),
        Schedule("node-kill", _kill_node, _restart_node),
        Schedule("cluster-crash", _crash_every_node, _restart_every_node),
        Schedule(
            "process-pause",
            _pause_processes,
            _resume_processes,
            sleepy_share=0.1,
            shortest_fault=8.0,
        ),
    ]
}


@dataclass(frozen=True)
class Timing:
    load: float  # seconds of client load
    calm: float  # before each fault
    fault: float  # each fault's length
    settle: float  # workers only, after healing

    @classmethod
    def full(cls) -> Timing:
        return cls(load=60.0, calm=4.0, fault=15.0, settle=20.0)  # three rounds

    @classmethod
    def short(cls) -> Timing:
        return cls(load=10.0, calm=2.0, fault=6.0, settle=8.0)


@dataclass
class Result:
    schedule: str
    calls: int
    outcomes: dict[str, int]
    counts: checker.Counts
    faults: int
    seconds: float
    operations: int
    states: dict[str, int]

    def line(self) -> str:
        counts = " ".join(f"{name}={value}" for name, value in self.counts.as_dict().items())
        return (
            f"{self.schedule}: {self.calls} calls (ok {self.outcomes.get('ok', 0)}, fail"
            f" {self.outcomes.get('fail', 0)}, unknown {self.outcomes.get('unknown', 0)}),"
            f" {self.faults} faults, {self.operations} operations {self.states},"
            f" {self.seconds:.0f} s | {counts}"
        )


def run_schedule(h: Harness, schedule: Schedule, timing: Timing, out: Path | None) -> Result:
    started = time.monotonic()
    h.cluster.wait_all_synced(180)  # whatever a schedule that failed half way left
    slug = schedule.name.replace("|", "-")
    owners = [f"{slug}-{owner}" for owner in OWNERS]
    jobs = {owner: h.product.prepare_owner(owner, JOBS_PER_OWNER) for owner in owners}
    history = History()
    h.product.take_sdk_calls()  # what the SDK worker did before belongs to earlier schedules
    load = Load(h.product, history, owners, jobs, sleepy_share=schedule.sleepy_share)
    fault_seconds = max(timing.fault, schedule.shortest_fault)
    faults = 0
    load.start()
    load_began = time.monotonic()
    try:
        # Rounds of calm then fault (at least one) while a round fits in the load time.
        while (
            left := timing.load - (time.monotonic() - load_began)
        ) >= timing.calm + fault_seconds or not faults:
            time.sleep(timing.calm)
            schedule.fault(h)
            faults += 1
            try:
                time.sleep(fault_seconds)
            finally:
                schedule.heal(h)
        time.sleep(max(left, 0.0))
        load.stop_clients()
        schedule.heal(h)
        h.cluster.wait_all_synced(180)
        _drain(h, f"{slug}-%", timing.settle)
    finally:
        schedule.heal(h)  # also when the schedule failed half way: nothing stays cut
        load.join()
    if load.errors:
        raise RuntimeError(f"a client failed: {load.errors[0]!r}") from load.errors[0]
    history.extend(h.product.take_sdk_calls())
    calls = history.calls
    rows, notifications = _final_rows(h.cluster, slug, named_operations(calls))
    own = [row for row in rows if row.owner.startswith(f"{slug}-")]
    counts = checker.check(
        calls,
        rows,
        notifications,
        checker.Limits(USER_LIMIT, GLOBAL_LIMIT, PRO_DAILY_TOKENS, GLOBAL_DAILY_TOKENS),
    )
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{slug}.history.jsonl").write_text(history.dump())
        final = {"operations": [asdict(row) for row in rows], "notifications": notifications}
        (out / f"{slug}.rows.json").write_text(json.dumps(final))
    return Result(
        schedule=schedule.name,
        calls=len(calls),
        outcomes=dict(Counter(call.outcome.value for call in calls)),
        counts=counts,
        faults=faults,
        seconds=time.monotonic() - started,
        operations=len(own),
        states=dict(Counter(row.state for row in own)),
    )


def _drain(h: Harness, owners: str, seconds: float) -> None:
    """Let the workers finish what is claimable, for up to ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        (active,) = _query(
            h.cluster,
            "SELECT COUNT(*) FROM user_operations WHERE state IN ('queued', 'running',"
            " 'waiting_for_retry') AND owner_user_id LIKE %s",
            owners,
        )[0]
        if not active:
            return
        time.sleep(0.5)


def _query(cluster: Cluster, sql: str, *args: str, patience: float = 90.0) -> list[tuple[Any, ...]]:
    """Through node 1 over its socket, after waiting for what the cluster committed. A
    node just healed may refuse for a while (1047 not prepared, 1205 when the causal wait
    times out, a dropped connection): asked again until ``patience`` runs out."""
    deadline = time.monotonic() + patience
    while True:
        try:
            with (
                pymysql.connect(
                    unix_socket=cluster.socket(1), user="root", database=DATABASE,
                    init_command=f"SET SESSION wsrep_sync_wait = {GALERA_SYNC_WAIT}",
                ) as conn,
                conn.cursor() as cursor,
            ):  # fmt: skip
                cursor.execute(sql, args)
                return list(cursor.fetchall())
        except pymysql.err.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def named_operations(calls: Sequence[Call]) -> set[str]:
    """Every operation id a call names, in its arguments or its answer."""
    return {
        str(named)
        for call in calls
        if (named := call.args.get("operation_id", call.result.get("operation_id")))
    }


def _final_rows(
    cluster: Cluster, slug: str, named: set[str]
) -> tuple[list[checker.StoredOperation], dict[str, int]]:
    """The operations of the schedule's owners and every other one its history names, with
    their notification counts. Its workers also claim what an earlier schedule on the same
    cluster left queued, and the SDK worker reports a completion when the service settles
    it, which may be after its own schedule read its history: such calls are checked
    against the rows they are about. (The cluster holds a few thousand rows: all are read.)"""
    rows = [
        checker.StoredOperation(
            str(r[0]), str(r[1]), str(r[2]), str(r[3]), int(r[4]), int(r[5]), int(r[6] or 0)
        )
        for r in _query(
            cluster,
            "SELECT id, owner_user_id, idempotency_key, state, attempt, max_attempts,"
            " reserved_tokens FROM user_operations",
        )
    ]
    rows = [row for row in rows if row.owner.startswith(f"{slug}-") or row.id in named]
    wanted = {row.id for row in rows} | named
    notes = _query(
        cluster,
        "SELECT operation_id, COUNT(*) FROM user_notifications WHERE operation_id IS NOT NULL"
        " GROUP BY operation_id",
    )
    return rows, {str(r[0]): int(r[1]) for r in notes if str(r[0]) in wanted}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="60 s of load per schedule")
    parser.add_argument("--schedules", default=",".join(SCHEDULES))
    parser.add_argument("--out", type=Path, default=None, help="keep each schedule's history")
    parser.add_argument("--tag", default="dj0")
    parser.add_argument("--prefix", default="10.77.0")
    parser.add_argument(
        "--flush-log-at-trx-commit", type=int, default=1, choices=(0, 1, 2),
        help="the nodes' innodb_flush_log_at_trx_commit; 0 shows a crash losing commits",
    )  # fmt: skip
    args = parser.parse_args(argv)
    timing = Timing.full() if args.full else Timing.short()
    chosen = [SCHEDULES[name] for name in args.schedules.split(",")]

    def terminate(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt  # so that the harness removes what it made

    signal.signal(signal.SIGTERM, terminate)
    results: list[Result] = []
    began = time.monotonic()
    with harness(args.tag, args.prefix, args.flush_log_at_trx_commit) as h:
        print(f"cluster and product up in {time.monotonic() - began:.0f} s", flush=True)
        for schedule in chosen:
            result = run_schedule(h, schedule, timing, args.out)
            results.append(result)
            print(result.line(), flush=True)
        if args.out is not None:
            h.product.logs.save(args.out / "product.log")
    broken = sum(result.counts.total() for result in results)
    print(json.dumps({"schedules": len(results), "broken": broken,
                      "load_average": os.getloadavg()}))  # fmt: skip
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
