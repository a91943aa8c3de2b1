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
import re
import shutil
import signal
import sqlite3
import subprocess
import threading
from datetime import timedelta
from pathlib import Path

import grpc
import pytest
from sqlalchemy.engine import make_url

from durable_ops import hoststore
from durable_ops.ai_worker.clients import OperationsClient
from durable_ops.ai_worker.journal import HostStoreJournal, JournalEntry, claim_of
from durable_ops.ai_worker.reconcile import reconcile
from durable_ops.local_secrets import load_or_create
from durable_ops.model.routing import Route
from durable_ops.model.scope import Role
from durable_ops.rpc.client import ServiceCaller, open_channel
from durable_ops.rpc.keys import ensure_role_keys
from durable_ops.storage import migrate
from durable_ops.storage.migrate import head_revision
from tests.support.clock import ManualClock
from tests.support.grpc_services import Services, running_services
from tests.support.keys import signing_key
from tests.support.operations_client import (
    ALICE,
    BOB,
    FAILED,
    SUCCEEDED,
    OpsClient,
    expect_failure,
)

HOST = "restore-host"
GUIDE = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
# Large enough that a copy made a few pages at a time, started again after every commit
# of another connection (the sqlite3 tool's `.backup`), never ends under the writer below.
PADDING_ROWS = 40_000
PADDING_BYTES = 2_000


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


def _embedded_guide() -> tuple[str, str]:
    """The guide's backup chain for an embedded stack, and its restore's first line."""
    text = GUIDE.read_text()
    section = text[text.index("### Backups of an embedded stack") :]
    backup, restore = re.findall(r"```sh\n(.*?)```", section, re.DOTALL)[:2]
    return backup, restore.splitlines()[0]


def _busy(database: Path, stop: threading.Event) -> None:
    # What a stack running analyses does: commit after commit, from another process.
    writer = sqlite3.connect(database, isolation_level=None)
    try:
        writer.execute("CREATE TABLE beats (n INTEGER)")
        n = 0
        while not stop.is_set():
            n += 1
            writer.execute("INSERT INTO beats VALUES (?)", (n,))
    finally:
        writer.close()


def test_the_guides_embedded_backup_finishes_while_the_stack_writes_and_restores(
    tmp_path: Path,
) -> None:
    if shutil.which("sqlite3") is None:
        pytest.skip("the sqlite3 tool, which the guide's backup uses, is not installed")
    backup, restore = _embedded_guide()
    stack = tmp_path / "stack"
    var = stack / "var"
    var.mkdir(parents=True, mode=0o700)
    database = var / "durable-ops.sqlite3"
    migrate.upgrade(f"sqlite:///{database}")
    with sqlite3.connect(database) as filling:
        filling.execute("CREATE TABLE padding (x BLOB)")
        filling.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)"
            " INSERT INTO padding SELECT randomblob(?) FROM n",
            (PADDING_ROWS, PADDING_BYTES),
        )
    filling.close()
    ensure_role_keys(var / "keys")
    load_or_create(var / "secrets.json")
    stop = threading.Event()
    writing = threading.Thread(target=_busy, args=(database, stop))
    writing.start()
    chain = subprocess.Popen(
        ["bash", "-c", backup],
        cwd=stack,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its sqlite3 goes with it if it must be stopped
    )
    try:
        _out, errors = chain.communicate(timeout=60)  # a guard: it never ended before
    except subprocess.TimeoutExpired:
        os.killpg(chain.pid, signal.SIGKILL)
        chain.communicate()
        pytest.fail("the guide's backup had not finished after 60 s of the stack's writes")
    finally:
        stop.set()
        writing.join()
    assert chain.returncode == 0, errors
    (archive,) = stack.glob("durable-ops-*.tgz")
    assert not (stack / "backup").exists()

    restored = tmp_path / "restored"
    restored.mkdir()
    command = restore.replace("durable-ops-2026-01-31.tgz", str(archive))
    subprocess.run(["bash", "-c", command], cwd=restored, check=True, timeout=60)
    copy = sqlite3.connect(restored / "var" / "durable-ops.sqlite3")
    try:
        assert copy.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert copy.execute("SELECT count(*) FROM padding").fetchone() == (PADDING_ROWS,)
        (revision,) = copy.execute("SELECT version_num FROM alembic_version").fetchone()
        assert revision == head_revision()
    finally:
        copy.close()
    for kept in ("secrets.json", "keys/worker/worker.key"):
        assert (restored / "var" / kept).stat().st_mode & 0o077 == 0, kept


def test_work_whose_deadline_passed_by_the_restore_fails_at_the_first_sweep(
    fresh_url: str, tmp_path: Path, clock: ManualClock
) -> None:
    url = fresh_url
    migrate.upgrade(url)
    copy = tmp_path / "backup"
    deadline = clock() + timedelta(minutes=30)
    with running_services(url, clock) as services:
        ops = OpsClient(services)
        running = ops.create(ALICE, "running", deadline=deadline)
        assert ops.claim_one().id == running.id
        waiting = ops.create(BOB, "waiting", deadline=deadline)
        _backup(url, copy)
    _restore(copy, url)
    clock.advance(timedelta(minutes=31).total_seconds())
    with running_services(url, clock) as services:
        ops = OpsClient(services)
        services.sweep()
        assert ops.get(ALICE, running.id).state == FAILED
        assert ops.get(BOB, waiting.id).state == FAILED
        assert ops.notifications_per_operation() == {running.id: 1, waiting.id: 1}
