"""``python -m benchmarks.claim_backlog [--backlog N] [--of KIND] [--sqlite-only]``: what a
claim costs behind a backlog it may not take. Run on purpose; not a section of
``python -m benchmarks``.

A fresh database gets ``--backlog`` (50,000) queued no-op operations the claim may not
take, spread over 20 owners, ``--of``:

- ``scheduled``: of the claimed type, scheduled for tomorrow (ADR 0050);
- ``other-type``: due, of a type the claim does not name (ADR 0051), as a type served
  by other workers, or by none, leaves them;
- ``paused``: due, of a type the claim names but an operator paused (ADR 0047).

Printed per engine, each the median of 7 tries through the storage layer: a claim of 10
with nothing it may take, the claim poll's question (``claimable_kinds``), a create
given its owner's turn (ADR 0049: it reads the head of the line), and a claim of 10
once one operation is due. Every try of every worker pays a claim, every user a create:
none of them should grow with the backlog. (The backlog is filled without turns, which
is faster and puts the same rows in the index.)
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import timedelta
from functools import partial
from typing import Any

from benchmarks.databases import mariadb_database, sqlite_database
from durable_ops.clock import utc_now
from durable_ops.storage import operations, task_pauses
from durable_ops.storage.db import Database
from durable_ops.storage.tx import Tx

TASK = "bench.noop"
OTHER = "bench.other"  # the claim names both; "other-type" fills a third
UNNAMED = "bench.unnamed"
OWNERS = 20
PER_TRANSACTION = 500
TRIES = 7
CLAIM = 10


def _request(key: str, task: str = TASK, **fields: Any) -> operations.CreateRequest:
    return operations.CreateRequest(
        task_type=task, idempotency_key=key, subject_type="bench", subject_id=key, **fields
    )


def _fill(db: Database, backlog: int, of: str) -> None:
    tomorrow = utc_now() + timedelta(days=1)
    task, fields = {
        "scheduled": (TASK, {"not_before": tomorrow}),
        "other-type": (UNNAMED, {}),
        "paused": (OTHER, {}),
    }[of]

    def create_some(tx: Tx, start: int) -> None:
        for n in range(start, min(start + PER_TRANSACTION, backlog)):
            operations.create(tx, _request(f"later-{n}", task, **fields), utc_now(), fair=False)

    for start in range(0, backlog, PER_TRANSACTION):
        owner = f"owner-{start // PER_TRANSACTION % OWNERS}"
        db.run(partial(create_some, start=start), owner_id=owner)
    if of == "paused":
        db.run(lambda tx: task_pauses.pause(tx, OTHER, "bench", utc_now()), owner_id=None)


def _median_ms(
    db: Database, ask: Callable[[Tx], object], *, write: bool, tries: int = TRIES
) -> float:
    took = []
    for _ in range(tries):
        started = time.perf_counter()
        db.run(ask, owner_id=None, write=write)
        took.append(time.perf_counter() - started)
    return statistics.median(took) * 1000


def _create_due(tx: Tx, key: str) -> None:
    operations.create(tx, _request(key), utc_now())


def _claim(tx: Tx) -> list[operations.Claim]:
    return operations.claim(tx, [TASK, OTHER], 60, utc_now(), limit=CLAIM)


def _poll(tx: Tx) -> set[tuple[str, str]]:
    kinds = {("queued", TASK), ("queued", OTHER)}
    return operations.claimable_kinds(tx, utc_now(), kinds)


def measure(url: str, backlog: int, of: str) -> dict[str, float]:
    db = Database(url, pool_size=2)
    try:
        started = time.monotonic()
        _fill(db, backlog, of)
        print(f"  {backlog:,} {of} in {time.monotonic() - started:.0f} s")
        figures = {
            "claim, nothing due": _median_ms(db, _claim, write=True),
            "claim poll": _median_ms(db, _poll, write=False),
        }
        created, claimed = [], []
        for n in range(TRIES):  # one operation due before each try, which takes it
            started = time.perf_counter()
            db.run(partial(_create_due, key=f"due-{n}"), owner_id="owner-due")
            created.append((time.perf_counter() - started) * 1000)
            claimed.append(_median_ms(db, _claim, write=True, tries=1))
        figures["create, its turn"] = statistics.median(created)
        figures["claim, one due"] = statistics.median(claimed)
        return figures
    finally:
        db.dispose()


ENGINES: tuple[tuple[str, Callable[[], AbstractContextManager[str]]], ...] = (
    ("MariaDB", mariadb_database),
    ("SQLite", sqlite_database),
)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.claim_backlog")
    parser.add_argument("--backlog", type=int, default=50_000)
    parser.add_argument("--of", choices=("scheduled", "other-type", "paused"), default="scheduled")
    parser.add_argument("--sqlite-only", action="store_true")
    args = parser.parse_args(argv)
    for name, database in ENGINES:
        if args.sqlite_only and name != "SQLite":
            continue
        print(f"{name}:")
        with database() as url:
            for label, ms in measure(url, args.backlog, args.of).items():
                print(f"  {label:<20} {ms:8.1f} ms (median of {TRIES})")


if __name__ == "__main__":
    main()
