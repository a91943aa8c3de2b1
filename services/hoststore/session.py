"""``acquire`` and the ``Session`` that holds a host store.

A session owns the directory descriptor and the ``host.lock`` descriptor, both
locked (``lockfile``), until ``close``. It keeps the last snapshot it persisted
(or loaded) in memory; the file is only read at acquire. Any error on the save
path, or finding ``host.lock`` or the directory replaced, poisons the session:
the rename may or may not have happened, so the caller must close, reacquire
and query before deciding anything.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Protocol, TypeVar

from durable_ops.hoststore import directory as location
from durable_ops.hoststore import ledger, lockfile, mounts, platforms, retention, statefile
from durable_ops.hoststore import snapshot as fmt
from durable_ops.hoststore.errors import (
    InvalidInput,
    LockReplaced,
    SaveFailed,
    SessionClosed,
    SessionPoisoned,
    SnapshotMissing,
    UnknownOperation,
)
from durable_ops.hoststore.filesystem import FileSystem
from durable_ops.hoststore.snapshot import Record, Snapshot, Tombstone
from durable_ops.hoststore.transitions import State, parse_state

Clock = Callable[[], datetime]


class _Persistable(Protocol):
    @property
    def snapshot(self) -> Snapshot: ...

    @property
    def payload(self) -> fmt.Encoded | None: ...


_Outcome = TypeVar("_Outcome", bound=_Persistable)


def _utc_now() -> datetime:
    return datetime.now(UTC)


def acquire(
    directory: str | os.PathLike[str],
    host_id: str,
    *,
    filesystem: FileSystem | None = None,
    clock: Clock = _utc_now,
) -> Session:
    """Lock the host store in ``directory`` for ``host_id`` and load (or create) it.

    Refuses unsupported platforms, unsafe directories and files, network/FUSE
    file systems, a lock held elsewhere, a marked store without ``state.json``
    and every invalid snapshot. ``filesystem`` and ``clock`` exist for tests.
    """
    platforms.require_supported()
    host = fmt.host_id(host_id)
    fs = filesystem if filesystem is not None else FileSystem()
    path = os.path.abspath(os.fspath(directory))
    dir_fd = location.open_directory(fs, path)
    lock_fd: int | None = None
    try:
        mounts.require_local(dir_fd, path)
        lock_fd = lockfile.open_and_lock(fs, dir_fd, path)
        current = _load_or_initialize(fs, dir_fd, lock_fd, host)
    except BaseException:
        if lock_fd is not None:
            _close_quietly(fs, lock_fd)
        _close_quietly(fs, dir_fd)
        raise
    return Session(
        path=path,
        dir_fd=dir_fd,
        lock_fd=lock_fd,
        current=current,
        filesystem=fs,
        clock=clock,
    )


class Session:
    """An exclusive hold on one host store. Not for sharing across processes.

    Calls are serialised by an internal mutex, so threads of one process may share
    a session. After ``close`` or poisoning every call except ``close`` raises.
    """

    def __init__(
        self,
        *,
        path: str,
        dir_fd: int,
        lock_fd: int,
        current: Snapshot,
        filesystem: FileSystem,
        clock: Clock,
    ) -> None:
        self._path = path
        self._dir_fd = dir_fd
        self._lock_fd = lock_fd
        # What the descriptors name cannot change; each save compares the paths with them.
        self._dir_identity = location.identity(dir_fd)
        self._lock_identity = location.identity(lock_fd)
        self._snapshot = current
        self._fs = filesystem
        self._clock = clock
        self._mutex = threading.Lock()
        # Re-encodes only what changed: a store retaining many records stays cheap to save.
        self._encoder = fmt.IncrementalEncoder()
        self._closed = False
        self._poison: str | None = None
        # Inside ``batch``: its depth, the snapshot saved before it and the document to save.
        self._batch_depth = 0
        self._batch_base: Snapshot | None = None
        self._batch_pending: fmt.Encoded | None = None

    @property
    def directory(self) -> str:
        return self._path

    @property
    def host_id(self) -> str:
        return self._snapshot.host_id

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def poisoned(self) -> bool:
        return self._poison is not None

    def begin(self, operation_id: str, plan_hash: str) -> tuple[Record | Tombstone, bool]:
        """Register queued work; ``(record, created)``. Same id and hash replays the original.

        For a compacted id the original is its ``Tombstone`` (``created`` is False).
        """
        identifier = fmt.operation_id(operation_id)
        plan = fmt.plan_hash(plan_hash)
        change = self._apply(
            lambda current, now: ledger.begin(
                current, identifier, plan, now=now, encoder=self._encoder
            )
        )
        return change.record, change.created

    def advance(self, operation_id: str, revision: int, next_state: State | str) -> Record:
        """Move ``operation_id`` from ``revision`` to ``next_state`` (compare-and-swap)."""
        identifier = fmt.operation_id(operation_id)
        if type(revision) is not int or revision < 1:
            raise InvalidInput(f"revision must be a positive integer, got {revision!r}")
        target = parse_state(next_state)
        change = self._apply(
            lambda current, now: ledger.advance(
                current, identifier, revision, target, now=now, encoder=self._encoder
            )
        )
        return change.record

    def get(self, operation_id: str) -> Record | Tombstone:
        """The record of ``operation_id``, or its tombstone once it has been compacted."""
        identifier = fmt.operation_id(operation_id)
        with self._mutex:
            self._require_usable()
            found: Record | Tombstone | None = self._snapshot.records.get(identifier)
            if found is None:
                found = self._snapshot.tombstones.get(identifier)
        if found is None:
            raise UnknownOperation(f"no operation {identifier!r}")
        return found

    def records(self) -> tuple[Record, ...]:
        """Every live (not compacted) record, sorted by id."""
        with self._mutex:
            self._require_usable()
            return tuple(sorted(self._snapshot.records.values(), key=lambda r: r.id))

    def tombstones(self) -> tuple[Tombstone, ...]:
        """What is kept of the compacted records, sorted by id."""
        with self._mutex:
            self._require_usable()
            return tuple(sorted(self._snapshot.tombstones.values(), key=lambda t: t.id))

    def compact(self, *, older_than: timedelta, now: datetime | None = None) -> int:
        """Turn terminal records last changed ``older_than`` ago or earlier into tombstones.

        Returns how many were compacted; with none, nothing is written. Otherwise
        the new snapshot is saved like any other change (and a failure poisons).
        ``now`` defaults to the session's clock. No id is forgotten: ``begin``
        and ``advance`` answer for a tombstone as for the terminal record it was.
        """
        return self._retain(ledger.compact, older_than, now)

    def forget(self, *, older_than: timedelta, now: datetime | None = None) -> int:
        """Drop tombstones whose final state is ``older_than`` ago or earlier; how many.

        The second, longer horizon of ADR 0018. A forgotten id is unknown
        afterwards, and ``begin`` of it creates a new record: use it only with a
        horizon beyond which requests are refused before they reach the store.
        """
        return self._retain(ledger.forget, older_than, now)

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Group the changes made inside into one save when the block ends.

        Inside the block every call answers as usual, but nothing is durable
        until the block ends: then the last snapshot is saved once (temp, fsync,
        rename, directory fsync), all of the changes or none. A failing save
        poisons the session as usual. If the block raises, nothing is saved and
        the session is back at its last saved snapshot. Do not act on a change
        (say, start the work a claim allows) before the block has ended.
        Batches nest: only the outermost one saves, or discards if it raises.
        """
        with self._mutex:
            self._require_usable()
            self._batch_depth += 1
            outermost = self._batch_depth == 1
            if outermost:
                self._batch_base = self._snapshot
        completed = False
        try:
            yield
            completed = True
        finally:
            with self._mutex:
                self._batch_depth -= 1
                if outermost:
                    pending, self._batch_pending = self._batch_pending, None
                    base, self._batch_base = self._batch_base, None
                    if not completed or self._closed or self._poison is not None:
                        if base is not None:
                            self._snapshot = base  # the encoder rebuilds on the next change
                    elif pending is not None:
                        self._persist(pending)

    def unresolved(self) -> Record | None:
        """The one non-terminal operation that blocks new ids, if any."""
        with self._mutex:
            self._require_usable()
            return self._snapshot.unresolved()

    def close(self) -> None:
        """Release the lock. Idempotent, and allowed on a poisoned session."""
        with self._mutex:
            if self._closed:
                return
            self._closed = True
            _close_quietly(self._fs, self._lock_fd)
            _close_quietly(self._fs, self._dir_fd)

    def __enter__(self) -> Session:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _retain(
        self,
        rule: Callable[..., ledger.Retained],
        older_than: timedelta,
        now: datetime | None,
    ) -> int:
        def decide(current: Snapshot, clock_now: str) -> ledger.Retained:
            moment = now if now is not None else self._clock()
            return rule(current, retention.cutoff(moment, older_than), encoder=self._encoder)

        return self._apply(decide).count

    def _apply(self, decide: Callable[[Snapshot, str], _Outcome]) -> _Outcome:
        with self._mutex:
            self._require_usable()
            change = decide(self._snapshot, fmt.format_timestamp(self._clock()))
            if change.payload is None:
                return change
            if self._batch_depth:
                # Saved once when the batch ends; until then only in memory.
                self._batch_pending = change.payload
            else:
                self._persist(change.payload)
            self._snapshot = change.snapshot
            return change

    def _persist(self, payload: fmt.Encoded) -> None:
        """Check the lock and the directory, then save ``payload``; any failure poisons."""
        try:
            location.check_unchanged(self._path, self._dir_fd, self._dir_identity)
            lockfile.check_held(self._dir_fd, self._lock_fd, self._lock_identity)
        except LockReplaced as exc:
            self._poison = exc.message
            raise
        try:
            statefile.save(self._fs, self._dir_fd, payload.parts)
        except OSError as exc:
            self._poison = f"saving state.json failed: {exc}"
            raise SaveFailed(
                f"saving state.json failed ({exc}); the session is poisoned: close it,"
                " reacquire and query before deciding anything",
                errno=exc.errno,
            ) from exc

    def _require_usable(self) -> None:
        if self._closed:
            raise SessionClosed("the session is closed")
        if self._poison is not None:
            raise SessionPoisoned(f"the session is poisoned: {self._poison}")


def _load_or_initialize(fs: FileSystem, dir_fd: int, lock_fd: int, host: str) -> Snapshot:
    marked = lockfile.is_marked(lock_fd)
    data = statefile.read(dir_fd)
    if data is None:
        if marked:
            raise SnapshotMissing(
                "host.lock says this store holds work but state.json is missing;"
                " restore it from a valid copy, never start afresh"
            )
        initial = Snapshot(host_id=host, records={})
        # The marker may only claim what is durable: snapshot first, marker second.
        document = fmt.encode(initial)
        _durably("initializing the store", lambda: statefile.save(fs, dir_fd, (document,)))
        _durably("writing the initialization marker", lambda: lockfile.write_marker(fs, lock_fd))
        return initial
    current = fmt.decode(data, expected_host_id=host)
    if not marked:
        # A crash between the first snapshot and the marker: the valid snapshot repairs it.
        _durably("repairing the initialization marker", lambda: lockfile.write_marker(fs, lock_fd))
    return current


def _durably(what: str, action: Callable[[], None]) -> None:
    try:
        action()
    except OSError as exc:
        raise SaveFailed(f"{what} failed: {exc}", errno=exc.errno) from exc


def _close_quietly(fs: FileSystem, fd: int) -> None:
    # Linux releases the descriptor (and with it the flock) even when close reports
    # an error, so there is nothing further to do with one.
    with contextlib.suppress(OSError):
        fs.close(fd)
