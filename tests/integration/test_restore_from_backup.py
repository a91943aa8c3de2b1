"""A restore from SQLite's online backup (docs/operations.md, "Backups of an embedded
stack") while work is under way: what the docs say it brings back and what it loses.

The backup is the documented one (Python's binding of SQLite's online backup, taken
while the services write); the restore puts that file in place of the live database
and starts the services on it again.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import grpc

from durable_ops import hoststore
from durable_ops.ai_worker.clients import OperationsClient
from durable_ops.ai_worker.journal import HostStoreJournal, JournalEntry, claim_of
from durable_ops.ai_worker.reconcile import reconcile
from durable_ops.model.routing import Route
from durable_ops.model.scope import Role
from durable_ops.rpc.client import ServiceCaller, open_channel
from durable_ops.storage import migrate
from tests.support.clock import ManualClock
from tests.support.grpc_services import Services, running_services
from tests.support.keys import signing_key
from tests.support.operations_client import (
    ALICE,
    BOB,
    SUCCEEDED,
    OpsClient,
    expect_failure,
)

HOST = "restore-host"


def _online_backup(live: Path, copy: Path) -> None:
    # As documented: one consistent snapshot of the WAL database while the services run.
    source = sqlite3.connect(live)
    target = sqlite3.connect(copy)
    try:
        source.backup(target)
    finally:
        target.close()
        source.close()


def _restore(copy: Path, live: Path) -> None:
    # As documented: the old database moved aside with its -wal and -shm files.
    for suffix in ("", "-wal", "-shm"):
        old = live.with_name(live.name + suffix)
        if old.exists():
            old.rename(old.with_name(old.name + ".old"))
    copy.rename(live)


def _reconciled(services: Services, store: Path) -> None:
    async def run() -> None:
        channel = open_channel(services.target, None)
        journal = HostStoreJournal.acquire(str(store), HOST)
        try:
            reader = OperationsClient(channel, ServiceCaller(signing_key(Role.WORKER)))
            async with asyncio.timeout(20):  # a guard: a wedged reconcile fails, not hangs
                await reconcile(journal, reader, asyncio.Event(), poll_seconds=0.01)
            assert journal.unresolved() == []
        finally:
            journal.close()
            await channel.close()

    asyncio.run(run())


def test_a_restore_carries_on_the_backups_work_and_forgets_what_came_after(
    tmp_path: Path, clock: ManualClock
) -> None:
    live = tmp_path / "var" / "durable-ops.sqlite3"
    live.parent.mkdir(mode=0o700)
    url = f"sqlite:///{live}"
    migrate.upgrade(url)
    copy = tmp_path / "backup.sqlite3"
    store = tmp_path / "host-store"
    store.mkdir(mode=0o700)

    with running_services(url, clock) as services:
        ops = OpsClient(services)
        held = ops.create(ALICE, "held")
        backed_up_lease = ops.claim_one()
        assert backed_up_lease.id == held.id
        queued = ops.create(BOB, "queued")
        _online_backup(live, copy)
        # After the backup: the held one ends (its notification written), the queued one
        # is claimed (journaled on this host, the worker then killed), and a new one is
        # made with an idempotency key.
        assert ops.complete(backed_up_lease) == SUCCEEDED
        later_lease = ops.claim_one()
        assert later_lease.id == queued.id
        journal = HostStoreJournal.acquire(str(store), HOST)
        journal.start(
            JournalEntry(
                later_lease.id,
                later_lease.operation.attempt,
                BOB,
                Route.LOCAL,
                claim_of(later_lease.token),
            )
        )
        journal.close()
        made_after = ops.create(ALICE, "made-after")

    _restore(copy, live)
    with running_services(url, clock) as services:
        ops = OpsClient(services)
        # The worker's journal disagrees with the restored database: the attempt it holds
        # as unfinished was never claimed there. It is closed, and claiming can go on.
        _reconciled(services, store)
        with hoststore.acquire(store, HOST) as session:
            assert [record.state for record in session.records()] == [
                hoststore.State.FAILED_RECOVERED
            ]
        # A lease recorded in the backup is valid again: its holder may end it, once.
        assert ops.complete(backed_up_lease) == SUCCEEDED
        assert ops.complete(backed_up_lease) == SUCCEEDED
        assert ops.notifications_per_operation() == {held.id: 1}
        # A lease taken after the backup is refused: its operation is queued again.
        expect_failure(lambda: ops.complete(later_lease), grpc.StatusCode.ABORTED, "lease_lost")
        again = ops.claim_one()
        assert again.id == queued.id
        assert again.token != later_lease.token
        # An operation made after the backup is gone, and its key makes a new one.
        expect_failure(lambda: ops.get(ALICE, made_after.id), grpc.StatusCode.NOT_FOUND)
        remade = ops.create_raw(ALICE, ops.create_request("made-after"))
        assert remade.created
        assert remade.operation.id != made_after.id
