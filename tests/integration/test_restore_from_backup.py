"""A restore from a backup taken while work is under way: what docs/operations.md
("What a restore does to work under way") says it brings back and what it loses.

The backups are the documented ones, taken while the services run: on SQLite, Python's
binding of SQLite's online backup, restored by putting the file in place of the old
database; on MariaDB, ``mariadb-dump --single-transaction --quick``, restored in place
with ``mariadb`` once the services have stopped (the guide's commands, without Compose).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import grpc
import pytest
from sqlalchemy.engine import make_url

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


def _sqlite_file(url: str) -> Path:
    return Path(url.removeprefix("sqlite:///"))


def _client(url: str, tool: str) -> tuple[list[str], dict[str, str]]:
    """``tool`` (mariadb-dump or mariadb) pointed at the database of ``url``."""
    found = shutil.which(tool)
    if found is None:
        pytest.skip(f"{tool}, which the guide's backup uses, is not installed")
    parsed = make_url(url)
    command = [
        found,
        f"--host={parsed.host or '127.0.0.1'}",
        f"--port={parsed.port or 3306}",
        f"--user={parsed.username or 'root'}",
    ]
    return command, {**os.environ, "MYSQL_PWD": parsed.password or ""}


def _backup(url: str, copy: Path) -> None:
    if url.startswith("sqlite"):
        # One consistent snapshot of the WAL database while the services write.
        source = sqlite3.connect(_sqlite_file(url))
        target = sqlite3.connect(copy)
        try:
            source.backup(target)
        finally:
            target.close()
            source.close()
        return
    command, env = _client(url, "mariadb-dump")
    with copy.open("wb") as dump:
        subprocess.run(
            [*command, "--single-transaction", "--quick", str(make_url(url).database)],
            stdout=dump,
            env=env,
            check=True,
            timeout=60,
        )


def _restore(copy: Path, url: str) -> None:
    if url.startswith("sqlite"):
        # The old database moved aside with its -wal and -shm files.
        live = _sqlite_file(url)
        for suffix in ("", "-wal", "-shm"):
            old = live.with_name(live.name + suffix)
            if old.exists():
                old.rename(old.with_name(old.name + ".old"))
        copy.rename(live)
        return
    command, env = _client(url, "mariadb")
    with copy.open("rb") as dump:
        subprocess.run(
            [*command, str(make_url(url).database)], stdin=dump, env=env, check=True, timeout=60
        )


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
    fresh_url: str, tmp_path: Path, clock: ManualClock
) -> None:
    url = fresh_url
    migrate.upgrade(url)
    copy = tmp_path / "backup"
    store = tmp_path / "host-store"
    store.mkdir(mode=0o700)

    with running_services(url, clock) as services:
        ops = OpsClient(services)
        held = ops.create(ALICE, "held")
        backed_up_lease = ops.claim_one()
        assert backed_up_lease.id == held.id
        queued = ops.create(BOB, "queued")
        _backup(url, copy)
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

    _restore(copy, url)
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
