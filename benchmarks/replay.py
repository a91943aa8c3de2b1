"""The raw-SQL baseline: replay the captured statements of a lifecycle with the same driver.

Each phase of the recording (create, claim, heartbeat, complete) is replayed
on a plain DB-API connection (PyMySQL or sqlite3, as the product uses), with
the captured parameters rewritten for a new operation: the operation id,
owner, idempotency key, subject and lease-token hash of the captured
lifecycle are replaced by fresh ones, any other 32-hex id by a fresh id, and
every timestamp is shifted to now. The claim's read-back row names the
operation the worker then heartbeats and completes. Deadlocks and lock waits
retry the whole transaction, as ``Database.run`` does.
"""

from __future__ import annotations

import re
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pymysql
from sqlalchemy.engine import make_url

from benchmarks.capture import Recording, Step
from benchmarks.databases import mariadb_connect
from durable_ops.storage.operations import hash_token

RETRYABLE = frozenset({1205, 1213})
MAX_ATTEMPTS = 8
_HEX_ID = re.compile(r"[0-9a-f]{32}")
_SQLITE_TIME = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(\.\d+)?")
SQLITE_TIME_FORMAT = "%Y-%m-%d %H:%M:%S.%f"
IDLE_SLEEP_SECONDS = 0.002


def connect(database_url: str) -> Any:
    """A DB-API connection configured as the product configures its engine's connections."""
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite":
        connection = sqlite3.connect(
            url.database or "", timeout=30, isolation_level=None, check_same_thread=False
        )
        for pragma in (
            "journal_mode=WAL",
            "synchronous=NORMAL",
            "foreign_keys=ON",
            "busy_timeout=30000",
        ):
            connection.execute(f"PRAGMA {pragma}")
        return connection
    mariadb = mariadb_connect(database_url, autocommit=False)
    with mariadb.cursor() as cursor:
        cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
    return mariadb


def _times(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str) and _SQLITE_TIME.fullmatch(value):
        return datetime.fromisoformat(value)
    return None


class Substitution:
    """Rewrites one phase's captured parameters for a new operation."""

    def __init__(self, known: dict[str, Any], fresh: dict[str, Any]) -> None:
        self._values = {known[name]: fresh[name] for name in fresh}
        self._ids: dict[str, str] = {}

    def bind(self, known: Any, fresh: Any) -> None:
        """From now on, rewrite the captured ``known`` value as ``fresh``."""
        self._values[known] = fresh

    def phase(self, steps: list[Step]) -> Callable[[Any], Any]:
        """A value mapper for ``steps``, shifting their timestamps to now."""
        captured = [
            moment
            for step in steps
            for value in _values(step.parameters)
            if (moment := _times(value)) is not None
        ]
        offset = datetime.now(UTC).replace(tzinfo=None) - min(captured) if captured else timedelta()

        def rewrite(value: Any) -> Any:
            if isinstance(value, str):
                if value in self._values:
                    return self._values[value]
                if _HEX_ID.fullmatch(value):
                    return self._ids.setdefault(value, uuid.uuid4().hex)
                if _SQLITE_TIME.fullmatch(value):
                    moment = datetime.fromisoformat(value) + offset
                    return moment.strftime(SQLITE_TIME_FORMAT)
                return value
            if isinstance(value, datetime):
                return self._values.get(value, value + offset)
            return value

        return rewrite


def _values(parameters: Any) -> list[Any]:
    if isinstance(parameters, dict):
        return list(parameters.values())
    if isinstance(parameters, list | tuple):
        return list(parameters)
    return []


def _map(parameters: Any, rewrite: Callable[[Any], Any]) -> Any:
    if isinstance(parameters, dict):
        return {key: rewrite(value) for key, value in parameters.items()}
    if isinstance(parameters, list | tuple):
        return tuple(rewrite(value) for value in parameters)
    return parameters


RowsSeen = Callable[[list[tuple[Any, ...]], list[str]], bool]


class Replayer:
    """One connection replaying phases; not shared between threads.

    ``batch``, when given, is a recording of a batched claim and completion
    (``capture.capture_batch``): ``claim_batch`` and ``finish_batch`` replay it
    for as many operations as it claimed.
    """

    def __init__(
        self, database_url: str, recording: Recording, batch: Recording | None = None
    ) -> None:
        self.connection = connect(database_url)
        self.recording = recording
        self.batch = batch
        self.columns: list[str] = []

    def close(self) -> None:
        self.connection.close()

    def _run(
        self, steps: list[Step], substitution: Substitution, seen: RowsSeen | None = None
    ) -> list[tuple[Any, ...]]:
        """Replay ``steps`` in one transaction; the rows of its last SELECT, if any."""
        for attempt in range(1, MAX_ATTEMPTS + 1):
            try:
                return self._once(steps, substitution, seen)
            except pymysql.err.OperationalError as exc:
                self.connection.rollback()
                if exc.args[0] not in RETRYABLE or attempt == MAX_ATTEMPTS:
                    raise
                time.sleep(min(0.002 * 2**attempt, 0.2))
        raise AssertionError("unreachable")

    def _once(
        self, steps: list[Step], substitution: Substitution, seen: RowsSeen | None
    ) -> list[tuple[Any, ...]]:
        """One try. ``seen`` gets the first SELECT's rows: it binds what they name, or
        answers False to skip the remaining statements (a claim that found too little)."""
        rewrite = substitution.phase(steps)
        rows: list[tuple[Any, ...]] = []
        skipping = False
        first = seen is not None
        cursor = self.connection.cursor()
        try:
            for step in steps:
                if step.kind == "commit":
                    self.connection.commit()
                elif step.kind == "rollback":
                    self.connection.rollback()
                elif not skipping and step.many:
                    rows_of = [_map(each, rewrite) for each in step.parameters]
                    cursor.executemany(step.statement, rows_of)
                elif not skipping:
                    cursor.execute(step.statement, _map(step.parameters, rewrite))
                    if cursor.description:
                        rows = list(cursor.fetchall())
                        self.columns = [column[0] for column in cursor.description]
                        if first and seen is not None:
                            first = False
                            skipping = not seen(rows, self.columns)
        finally:
            cursor.close()
        return rows

    def create(self, owner: str, key: str) -> None:
        fresh = {"owner": owner, "key": key, "subject": "s", "operation_id": uuid.uuid4().hex}
        self._run(self.recording.steps["create"], Substitution(self.recording.known, fresh))

    def claim(self) -> tuple[str, str, str] | None:
        """(operation id, owner, token hash) of the claimed operation, or None."""
        token_hash = hash_token(uuid.uuid4().hex)
        substitution = Substitution(self.recording.known, {"token_hash": token_hash})
        found: list[tuple[str, str, str]] = []

        def seen(rows: list[tuple[Any, ...]], columns: list[str]) -> bool:
            found.clear()  # a replayed try (a deadlock) answers afresh
            if not rows:
                return False
            row = dict(zip(columns, rows[0], strict=True))
            substitution.bind(self.recording.known["operation_id"], row["id"])
            found[:] = [(str(row["id"]), str(row["owner_user_id"]), token_hash)]
            return True

        self._run(self.recording.steps["claim"], substitution, seen)
        return found[0] if found else None

    def finish(self, claimed: tuple[str, str, str], *, heartbeat: bool = True) -> None:
        operation_id, owner, token_hash = claimed
        fresh = {"operation_id": operation_id, "owner": owner, "token_hash": token_hash}
        substitution = Substitution(self.recording.known, fresh)
        if heartbeat:
            self._run(self.recording.steps["heartbeat"], substitution)

        def seen(rows: list[tuple[Any, ...]], columns: list[str]) -> bool:
            row = dict(zip(columns, rows[0], strict=True)) if rows else {}
            substitution.bind(self.recording.known["updated_at"], row.get("updated_at"))
            return True

        self._run(self.recording.steps["complete"], substitution, seen)

    def claim_batch(self) -> list[tuple[str, str, str]]:
        """A whole batch's claim, or nothing (and nothing claimed) when fewer are claimable."""
        assert self.batch is not None
        known = self.batch.known
        substitution = Substitution({}, {})
        hashes = [hash_token(uuid.uuid4().hex) for _ in known["operation_ids"]]
        for captured, fresh in zip(known["token_hashes"], hashes, strict=True):
            substitution.bind(captured, fresh)
        found: list[tuple[str, str, str]] = []

        def seen(rows: list[tuple[Any, ...]], columns: list[str]) -> bool:
            found.clear()  # a replayed try (a deadlock) answers afresh
            if len(rows) < len(hashes):
                return False
            for n, values in enumerate(rows):
                row = dict(zip(columns, values, strict=True))
                substitution.bind(known["operation_ids"][n], row["id"])
                substitution.bind(known["owners"][n], row["owner_user_id"])
                found.append((str(row["id"]), str(row["owner_user_id"]), hashes[n]))
            return True

        self._run(self.batch.steps["claim"], substitution, seen)
        return found

    def finish_batch(self, claimed: list[tuple[str, str, str]]) -> None:
        assert self.batch is not None
        known = self.batch.known
        substitution = Substitution({}, {})
        for n, (operation_id, owner, token_hash) in enumerate(claimed):
            substitution.bind(known["operation_ids"][n], operation_id)
            substitution.bind(known["owners"][n], owner)
            substitution.bind(known["token_hashes"][n], token_hash)
        positions = {operation_id: n for n, (operation_id, _, _) in enumerate(claimed)}

        def seen(rows: list[tuple[Any, ...]], columns: list[str]) -> bool:
            # The completion guards each row on the updated_at it read: the replay's own.
            for values in rows:
                row = dict(zip(columns, values, strict=True))
                n = positions[str(row["id"])]
                substitution.bind(known["updated_ats"][n], row["updated_at"])
            return True

        self._run(self.batch.steps["complete"], substitution, seen)


def run_lifecycles(
    database_url: str,
    recording: Recording,
    *,
    total: int,
    producers: int,
    workers: int,
    owners: int,
    run_id: str,
    heartbeat: bool = True,
    batch: Recording | None = None,
) -> float:
    """The baseline of ``client.run_lifecycles``: same shape, threads and raw SQL; with
    ``batch``, workers replay whole batches while there are, single lifecycles after."""
    lock = threading.Lock()
    state = {"next": 0, "completed": 0}
    done = threading.Event()
    errors: list[BaseException] = []

    def produce() -> None:
        replayer = Replayer(database_url, recording)
        try:
            while True:
                with lock:
                    index = state["next"]
                    if index >= total:
                        return
                    state["next"] += 1
                replayer.create(f"bench-owner-{index % owners}", f"{run_id}-{index}")
        except BaseException as exc:
            errors.append(exc)
            done.set()
        finally:
            replayer.close()

    def work() -> None:
        replayer = Replayer(database_url, recording, batch)
        try:
            while not done.is_set():
                finished = 0
                if batch is not None:
                    batched = replayer.claim_batch()
                    if batched:
                        replayer.finish_batch(batched)
                        finished = len(batched)
                if not finished:  # no batch recording, or not a whole batch claimable
                    claimed = replayer.claim()
                    if claimed is None:
                        time.sleep(IDLE_SLEEP_SECONDS)
                        continue
                    replayer.finish(claimed, heartbeat=heartbeat)
                    finished = 1
                with lock:
                    state["completed"] += finished
                    if state["completed"] >= total:
                        done.set()
        except BaseException as exc:
            errors.append(exc)
            done.set()
        finally:
            replayer.close()

    threads = [threading.Thread(target=produce) for _ in range(producers)]
    threads += [threading.Thread(target=work) for _ in range(workers)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise errors[0]
    _check_all_succeeded(database_url, run_id, total)
    return total / elapsed


_SUCCEEDED = (
    "SELECT COUNT(*) FROM user_operations WHERE state = 'succeeded' AND idempotency_key LIKE "
)
_SUCCEEDED_SQLITE, _SUCCEEDED_MARIADB = _SUCCEEDED + "?", _SUCCEEDED + "%s"


def _check_all_succeeded(database_url: str, run_id: str, total: int) -> None:
    """A replay whose guarded UPDATEs matched nothing would be a cheap, false baseline."""
    connection = connect(database_url)
    try:
        cursor = connection.cursor()
        sqlite = isinstance(connection, sqlite3.Connection)
        cursor.execute(_SUCCEEDED_SQLITE if sqlite else _SUCCEEDED_MARIADB, (f"{run_id}-%",))
        (succeeded,) = cursor.fetchone()
        cursor.close()
    finally:
        connection.close()
    if succeeded != total:
        raise AssertionError(f"the replay completed {succeeded} of {total} operations")
